"""Planning: the plan rows a change writes, and the worker that turns each into who is
told what, when (the notification rows, reminders included)."""

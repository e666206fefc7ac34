"""Decision callbacks: outbox, signing, delivery, retries and their logs."""

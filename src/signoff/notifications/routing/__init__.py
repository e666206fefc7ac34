"""Routing: the document that says who hears of a request and where (its rules and
channels), its validation, storage and dashboard form."""

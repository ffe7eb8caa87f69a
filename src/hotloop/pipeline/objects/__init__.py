"""The stored-object endpoints: responses (retrieve, delete, input items, cancel, usage), conversations, compact."""

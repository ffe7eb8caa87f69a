"""Tool kinds, one module each (protocol.md §1.4, §1.11): what a kind declares, how its calls and outputs read to
the model, and how the model's call becomes its item. Above `wire/`, below `chat/`: no I/O."""

"""Questions about Python's own reference topics (`pydoc_data.topics`, shipped with every CPython), each with the
topics that answer it: the retrieval-quality corpus of tests/test_filesearch.py. Written for this corpus, in the
words a user would ask in, not the reference's own headings."""

from __future__ import annotations

QUESTIONS: list[tuple[str, frozenset[str]]] = [
    (q, frozenset(t.split()))
    for q, t in [
        ("How do I check a condition while debugging that disappears when Python runs optimized?", "assert"),
        ("What happens with a = b = c, several targets in one statement?", "assignment"),
        ("How do I loop over an asynchronous iterator inside a coroutine?", "async"),
        ("How are names with two leading underscores changed inside a class body?", "atom-identifiers"),
        ("How does x += 1 update a mutable object in place?", "augassign"),
        ("How do I suspend a coroutine until something it waits on is done?", "await async"),
        ("What does the @ operator between two operands compute?", "binary operator-summary specialnames"),
        ("Which operators do bitwise and, or and exclusive or on integers?", "bitwise"),
        ("What is the object written as three dots?", "bltin-ellipsis-object"),
        ("What value does a function return when it has no return statement?", "bltin-null-object return"),
        ("How do I leave a loop before it has finished?", "break"),
        ("How do I skip the rest of this pass and go to the next iteration?", "continue"),
        (
            "How can a class pick its metaclass and what does the body of a class do when it runs?",
            "class customization",
        ),
        ("Can comparisons be chained, like a < b < c?", "comparisons"),
        ("Which methods does an object need to work in a with block?", "context-managers with specialnames"),
        (
            "What is the difference between the official string representation and the informal one of an object?",
            "customization specialnames",
        ),
        ("How do I step through my program line by line in the built-in debugger?", "debugger"),
        ("How do I remove a key from a dictionary or unbind a variable?", "del typesmapping"),
        ("How do I build a mapping from an iterable with a comprehension?", "dict"),
        ("What happens when an error is raised and nothing catches it?", "exceptions execmodel"),
        ("How does Python decide which scope a variable name belongs to?", "naming execmodel dynamic-features"),
        ("How do I write a number like one times ten to the tenth as a literal?", "floating numbers"),
        ("Is the default value of a parameter computed once or on every call?", "function"),
        ("How do I change a module-level variable from inside a function?", "global naming"),
        ("How do I rebind a variable of the enclosing function from a nested function?", "nonlocal naming"),
        ("How do I write complex number literals?", "imaginary numbers"),
        ("How do imports with leading dots find a module relative to the current package?", "import"),
        ("How do I test whether an item is contained in a list or a string?", "in typesseq"),
        ("How do I write a small anonymous function inline?", "lambda"),
        ("What does -2 ** 2 evaluate to and why?", "power operator-summary"),
        ("How do I raise a new error while keeping the original one as its cause?", "raise exceptions"),
        ("How do I take every second element of a list with a slice?", "slicings typesseq"),
        ("How do I split a string on whitespace and join pieces back together?", "string-methods"),
        ("How do backslashes behave in raw string literals?", "strings"),
        ("Which values count as false in an if statement?", "truth booleans"),
        ("How do I run cleanup code whether or not an error happened?", "try"),
        ("How do I write a function that produces values lazily, one at a time?", "yield types"),
        ("How do I shift the bits of an integer to the left?", "shifting"),
        ("What does the tilde operator do to an integer?", "unary"),
        ("Which methods add elements to the end of a list?", "typesseq-mutable"),
        ("How do I get all keys, values or key-value pairs of a dict?", "typesmapping"),
        ("How do I call a function with arguments unpacked from a list and a dictionary?", "calls"),
        ("How do I pad a number with zeros and set the precision in an f-string?", "formatstrings"),
        ("Which methods control what happens when an attribute is read that does not exist?", "attribute-access"),
        ("How do I make instances of my class callable like functions?", "callable-types specialnames"),
    ]
]

"""The base of every error tfjob raises (the tree is drawn in tfjob/__init__.py).

tfjob is the pure core: its errors all say that an input (a request, a tenants
file, endpoints, an S3 URL) is wrong and nothing was done, so the base is a
ValueError and the caller's move is always the same: correct the input it
names and try again. Standard library only.
"""


class TfjobError(ValueError):
    """An input tfjob was given is wrong: the message names it, what was given, what is allowed."""

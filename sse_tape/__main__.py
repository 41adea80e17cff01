"""`python -m sse_tape` runs the command line."""

from .cli import main

main()

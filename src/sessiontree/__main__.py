"""`python -m sessiontree`: the `sessiontree` command."""

from .cli import main

if __name__ == "__main__":
    main()

"""`python -m sessiontree`: the `sessiontree` command."""

from sessiontree.cli import main

if __name__ == "__main__":
    main()

"""``python -m logfs``: the same as the ``logfs`` command."""

from logfs.cli import main

if __name__ == "__main__":
    main(prog_name="logfs")

"""`python -m ferry ARGS...` (and the `ferry` script pip installs): the ferry CLI, in this process."""

import sys


def main(argv=None) -> int:
    from ._ferry import _cli_main

    args = list(sys.argv[1:] if argv is None else argv)
    sys.stdout.flush()
    sys.stderr.flush()
    return _cli_main(["ferry"] + [str(a) for a in args])


if __name__ == "__main__":
    sys.exit(main())

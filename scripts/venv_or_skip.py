"""For check scripts whose reference library may be missing: rerun the script in the project's
.venv/ (scripts/setup.sh --python makes it) when that has what this interpreter lacks, else exit
77 (ctest's "skipped") saying what to install."""
import os
import pathlib
import sys


def reexec_in_venv_or_skip(error, packages):
    """Called on the ImportError `error` for `packages` (what to pip install)."""
    venv = pathlib.Path(__file__).resolve().parent.parent / ".venv"
    # Its python links to the base interpreter: compare the environment's prefix, not the
    # executable.
    if (venv / "bin" / "python").exists() and pathlib.Path(sys.prefix).resolve() != venv.resolve():
        os.execv(str(venv / "bin" / "python"), [str(venv / "bin" / "python"), *sys.argv])
    print(f"SKIPPED: {error}; run `scripts/setup.sh --python` (a .venv/ with it) or "
          f"`pip install {packages}`")
    sys.exit(77)

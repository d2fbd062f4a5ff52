"""What the tree rules (scripts/lint/check_*.py) share: the source files
they walk and how they report."""
import pathlib

SUFFIXES = (".cpp", ".h", ".cc", ".hpp")


def sources(root, dirs):
    """(path, path relative to root) of every C++ source file under root/dirs, sorted."""
    for d in dirs:
        for p in sorted((root / d).rglob("*")):
            if p.suffix in SUFFIXES and p.is_file():
                yield p, p.relative_to(root)


def verdict(tool, bad, what_bad, all_good):
    """Prints one line per offender and the summary; the exit status."""
    for b in bad:
        print(b)
    print(f"{tool}: {len(bad)} {what_bad}" if bad else f"{tool}: {all_good}")
    return 1 if bad else 0

#!/usr/bin/python3
"""Build a notebook from `korch exec --json` lines and validate it with nbformat.

  korch exec --json -c A -c B | nb_validate.py 'A' 'B'

The positional arguments are the cells' sources, in order. Prints "valid N"
(N outputs in all) or the validation error, and exits 1 on error.
"""
import json
import sys

import nbformat
from nbformat.v4 import new_code_cell, new_notebook


def main():
    results = [json.loads(line) for line in sys.stdin if line.strip()]
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    total = 0
    for src, r in zip(sys.argv[1:], results):
        cell = new_code_cell(source=src, execution_count=r["execution_count"])
        cell.outputs = [nbformat.from_dict(o) for o in r["outputs"]]
        total += len(cell.outputs)
        nb.cells.append(cell)
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as e:
        print("invalid: %s" % e)
        sys.exit(1)
    # and it survives a write/read round trip
    nbformat.reads(nbformat.writes(nb), as_version=4)
    print("valid %d" % total)


if __name__ == "__main__":
    main()

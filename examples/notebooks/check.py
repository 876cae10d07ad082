"""Executes notebooks as CI does: any error cell fails, and so does a cell that calls plt.show()
without producing a figure. Usage: python3 check.py OUT_DIR NOTEBOOK...
(The notebooks read AET_RUN, AET_RUNS and AET_PARQUET from the environment.)"""
import pathlib
import sys

import nbclient
import nbformat


def main() -> int:
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for path in map(pathlib.Path, sys.argv[2:]):
        nb = nbformat.read(path, as_version=4)
        try:
            nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                    resources={"metadata": {"path": str(path.parent)}}).execute()
        except nbclient.exceptions.CellExecutionError as e:
            print(f"{path}: a cell failed: {str(e).splitlines()[0] if str(e) else e}")
            failed += 1
            continue
        finally:
            nbformat.write(nb, out / path.name)
        figures = 0
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            errors = [o for o in cell.outputs if o.output_type == "error"]
            images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
            if errors:
                print(f"{path}: cell {i} has an error output: {errors[0].ename}")
                failed += 1
            if "plt.show()" in cell.source and not images:
                print(f"{path}: cell {i} shows no figure")
                failed += 1
            figures += len(images)
        print(f"{path.name}: ok, {figures} figure(s) -> {out / path.name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

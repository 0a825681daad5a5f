"""Run a notebook's code cells in order in one namespace (a developer's check that every cell runs on this GPU).
Each cell is written to a file first, so that @triton.jit finds its source."""
import json, os, sys, tempfile, time, traceback
sys.path.insert(0, os.getcwd())
import matplotlib
matplotlib.use("Agg")
nb = json.load(open(sys.argv[1]))
ns = {"__name__": "__main__"}
tmp = tempfile.mkdtemp(prefix="cells-")
bad = 0
for i, c in enumerate(nb["cells"]):
    if c["cell_type"] != "code":
        continue
    src = "".join(c["source"])
    path = os.path.join(tmp, f"c{i}.py")
    with open(path, "w") as f:
        f.write(src)
    print(f"\n######## c{i} ({c['id']})", flush=True)
    t = time.time()
    try:
        exec(compile(src, path, "exec"), ns)
    except Exception:
        traceback.print_exc()
        bad += 1
    print(f"######## c{i} done in {time.time() - t:.1f} s", flush=True)
print(f"\n{bad} cell(s) failed")
sys.exit(1 if bad else 0)

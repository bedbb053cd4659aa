"""README.md's "Your model" section, run as written: its command lines in order and its two experiment
files, with its placeholders standing for real things (DIR: a tiny random-weight Llama checkpoint
directory; MODEL.gguf: the shipped SmolLM2's GGUF file; FILE: the start of the built-in text) and its
outputs (my.h5, my-report, ...) placed in a temporary folder. Two substitutions: `build/harness/qattn`
is the binary under test, and `bash scripts/model-eval.sh X` runs the script's last line
(`.venv-dump/bin/python -m qattn.model_eval X`) with the package under test, since its install steps
would point the user's environment at this build. Then checks what each step wrote.
    test_readme_your_model.py QATTN_BINARY      (in the dumper's environment; PYTHONPATH = BUILD/python)
"""
import csv
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_checkpoints import checkpoint, tokenizer_for  # noqa: E402

from qattn import models  # noqa: E402

SECTION = "## Your model\n"


def section_blocks(readme):
    """The section's indented blocks, each a list of lines (4-space indent removed)."""
    text = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks, cur = [], []
    for line in text.splitlines():
        if line.startswith("    "):
            cur.append(line[4:])
        elif cur and line.strip() == "":
            cur.append("")
        elif cur:
            blocks.append(cur)
            cur = []
    if cur:
        blocks.append(cur)
    return [[l for l in b if l] for b in blocks]


def substitute(value, names):
    return names.get(value, value)


def main():
    qattn_bin = Path(sys.argv[1]).resolve()
    blocks = section_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(blocks) == 3, f"README.md's {SECTION.strip()!r}: expected 3 indented blocks (commands, two experiment files), found {len(blocks)}"
    commands, experiment, model_eval = blocks
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        text, _ = models.prose_text()
        (tmp / "text.txt").write_text(text[:20000], encoding="utf-8")
        ckpt = checkpoint("llama", {"max_position_embeddings": 4096}, tmp / "llama", tokenizer_for(text[:20000]))
        names = {"DIR": str(ckpt), "FILE": str(tmp / "text.txt"), "MODEL.gguf": str(models.gguf_path("smollm2", tmp / "cache"))}
        for out in ("my.h5", "my-gguf.h5", "my-report", "my-model-eval", "my-experiment.json", "my-model-eval.json"):
            names[out] = str(tmp / out)
        # The two experiment files as the README shows them, placeholders and outputs substituted.
        for name, lines in (("my-experiment.json", experiment), ("my-model-eval.json", model_eval)):
            doc = json.loads("\n".join(lines))
            doc = {k: substitute(v, names) if isinstance(v, str) else v for k, v in doc.items()}
            Path(names[name]).write_text(json.dumps(doc), encoding="utf-8")
        for line in commands:
            argv = [substitute(a, names) for a in shlex.split(line)]
            if argv[0] == ".venv-dump/bin/python":
                argv[0] = sys.executable
            elif argv[0] == "build/harness/qattn":
                argv[0] = str(qattn_bin)
            elif argv[:2] == ["bash", "scripts/model-eval.sh"]:
                argv = [sys.executable, "-m", "qattn.model_eval", *argv[2:]]
            else:
                raise AssertionError(f"README.md's {SECTION.strip()!r}: a command this test does not know how to run: {line}")
            print("+", shlex.join(argv), flush=True)
            r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
            assert r.returncode == 0, f"{line}\nexit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            print(r.stdout[-600:], flush=True)

        # What the steps wrote: every layer of the checkpoint, two of the GGUF model, the eval's score,
        # the experiment's report and the end-to-end rows.
        with h5py.File(names["my.h5"]) as f:
            assert sorted(f["layers"], key=int) == ["0", "1"] and f.attrs["n_tokens"] == 2048
        with h5py.File(names["my-gguf.h5"]) as f:
            assert sorted(f["layers"], key=int) == ["0", "1"] and "gguf_file" in f.attrs and f["layers/0/k"].shape[1] == 2048
        rows = list(csv.DictReader(open(Path(names["my-report"]) / "results.csv")))
        assert {r["recipe"] for r in rows} == {"bf16", "int8 + e4m3"} and {r["layer"] for r in rows} == {"0", "1"}, rows[:2]
        end = {json.loads(l)["recipe"]: json.loads(l) for l in open(Path(names["my-model-eval"]) / "results.jsonl")}
        one, every = end["int8 + e4m3, layer 0"]["kl_mean"], end["int8 + e4m3"]["kl_mean"]
        # The recipe on layer 0 alone and on both layers: each moves the next-token distributions, differently.
        assert one > 0 and every > 0 and one != every, (one, every)
    print("README.md's Your model section ran as written")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""kiln's model zoo: export many PyTorch models to ONNX, run them in kiln, compare with PyTorch.

    zoo.py export --out DIR [--filter REGEX] [--jobs N] [--exporters dynamo,legacy] [--max-params N]
    zoo.py run    --dir DIR --kiln PATH [--backends cpu,cuda] [--precisions fp32,fp16] [--jobs N]
                  [--timeout S] [--filter REGEX]
    zoo.py report --dir DIR --out RESULTS.md [--device "NVIDIA H200"]
    zoo.py prune  --dir DIR [--backends cpu,cuda]
    zoo.py left   --dir DIR [--filter REGEX] [--shard K/N] [--backends cpu,cuda]
    zoo.py resume --dir DIR --tgz RESULTS.tgz [--backends cpu,cuda]
    zoo.py list   [--filter REGEX]
    zoo.py fixture --dir DIR --case CASE --out tests/data/zoo/NAME [--node NODE]

Every step is resumable: a case's export is done once DIR/<case>/meta.json exists, a run once
DIR/<case>/result_<backend>_<precision>.json (and ort.json) exists. --budget S stops starting
jobs (and cuts running ones short, unrecorded) after S seconds, to fit a limited command time.
See README.md.
"""

import argparse
import os
import re
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the repository

import common  # noqa: E402

DONE_EXPORT = ("exported", "export_failed", "skipped")
_print_lock = threading.Lock()


def say(*args):
    with _print_lock:
        print(*args, flush=True)


def select_cases(args):
    import registry

    rx = re.compile(args.filter) if args.filter else None
    exporters = [e for e in args.exporters.split(",") if e]
    shard, shards = parse_shard(getattr(args, "shard", None))
    cases, position = [], 0
    for index, spec in enumerate(registry.all_specs()):
        for exporter, kind in common.cases_for(index, spec, exporters):
            name = common.case_name(spec.name, exporter, kind)
            # Round-robin over the full list, so each shard gets its share of the large models.
            mine = position % shards == shard
            position += 1
            if mine and (rx is None or rx.search(name)):
                cases.append((name, spec))
    return cases


def parse_shard(text):
    """'K/N' -> (K, N): this invocation takes every N-th case of the full list, from the K-th."""
    if not text:
        return 0, 1
    m = re.fullmatch(r"(\d+)/(\d+)", text)
    if not m or int(m.group(2)) < 1 or int(m.group(1)) >= int(m.group(2)):
        sys.exit(f"zoo: --shard wants K/N with 0 <= K < N, not `{text}`")
    return int(m.group(1)), int(m.group(2))


def pool(jobs, tasks, fn):
    """Runs fn(task) on `jobs` threads (each fn starts subprocesses); yields (task, result)."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        futures = {ex.submit(fn, t): t for t in tasks}
        for fut in as_completed(futures):
            try:
                yield futures[fut], fut.result()
            except Exception as e:  # a harness bug on one case must not stop the others
                say(f"  harness error on {futures[fut]}: {type(e).__name__}: {e}")
                yield futures[fut], None


# ---------------------------------------------------------------- export

def cmd_export(args):
    os.makedirs(args.out, exist_ok=True)
    deadline = common.Deadline(args.budget)
    todo, done = [], 0
    for name, spec in select_cases(args):
        meta = common.read_json(os.path.join(args.out, name, "meta.json"))
        redo = meta is None or meta.get("status") not in DONE_EXPORT
        if meta and meta.get("status") == "skipped" and meta.get("max_params") != args.max_params:
            redo = True  # skipped for its size under another --max-params
        if meta and args.retry_failed and meta.get("status") == "export_failed":
            redo = True
        if redo:
            todo.append(name)
        else:
            done += 1
    say(f"export: {len(todo)} cases to export, {done} already done, {args.jobs} jobs -> {args.out}")
    start = time.perf_counter()

    def one(name):
        left = deadline.timeout(args.timeout)
        if left is None:
            return "deferred"
        log = os.path.join(args.out, f"{name}.export.log")
        cmd = [sys.executable, os.path.abspath(__file__), "_export-one", "--out", args.out, "--case", name,
               "--max-params", str(args.max_params), "--threads", str(args.threads)]
        code, out, err, secs = common.run_process(cmd, left, env=common.on_one_gpu(name), log=log)
        meta_path = os.path.join(args.out, name, "meta.json")
        meta = common.read_json(meta_path)
        if meta is None:
            if code is None and left < args.timeout:  # the budget ran out: try again next invocation
                shutil.rmtree(os.path.join(args.out, name), ignore_errors=True)
                os.remove(log)
                return "deferred"
            os.makedirs(os.path.join(args.out, name), exist_ok=True)
            model, exporter, kind = common.split_case(name)
            why = (f"PyTorch export failed: timeout after {left:.0f} s" if code is None
                   else f"export worker died: {common.first_error_line(err, code)}")
            meta = {"case": name, "model": model, "exporter": exporter, "shape_kind": kind, "status": "export_failed",
                    "error": why[:400], "export_seconds": secs, "max_params": args.max_params}
            common.write_json(meta_path, meta)
        if os.path.exists(log):
            os.replace(log, os.path.join(args.out, name, "export.log"))
        return f"{meta['status']:13s} {secs:6.1f} s  {meta.get('error', '')[:100]}"

    counts = {}
    for name, result in pool(args.jobs, todo, one):
        say(f"  {name:60s} {result}")
        key = (result or "error").split()[0]
        counts[key] = counts.get(key, 0) + 1
    say(f"export: {counts} in {time.perf_counter() - start:.0f} s")


def cmd_export_one(args):
    import export_case

    export_case.export_one(args.out, args.case, args.max_params, args.threads)


# ---------------------------------------------------------------- run

def exported_cases(root, filter_rx):
    rx = re.compile(filter_rx) if filter_rx else None
    out = []
    for name in sorted(os.listdir(root)):
        meta = common.read_json(os.path.join(root, name, "meta.json"))
        if meta and meta.get("status") == "exported" and (rx is None or rx.search(name)):
            out.append((name, meta))
    return out


def cmd_run(args):
    import run_case

    root = os.path.abspath(args.dir)
    kiln = os.path.abspath(args.kiln)
    if not os.access(kiln, os.X_OK):
        sys.exit(f"zoo: no kiln binary at {kiln}")
    deadline = common.Deadline(args.budget)
    backends = [b for b in args.backends.split(",") if b]
    precisions = [p for p in args.precisions.split(",") if p]
    jobs = []
    for name, meta in exported_cases(root, args.filter):
        size = meta.get("param_count") or 0
        if not args.no_ort and (args.redo or not os.path.exists(os.path.join(root, name, "ort.json"))):
            jobs.append((size, name, "ort", None))
        for b, p in kiln_jobs(backends, precisions):
            if args.redo or not os.path.exists(os.path.join(root, name, f"result_{b}_{p}.json")):
                jobs.append((size, name, b, p))
    jobs.sort(key=lambda j: -j[0])  # largest models first: the long jobs do not end up last
    code, out, err, _ = common.run_process([kiln, "--version"], 30, env=run_case.kiln_env("fp32"))
    info = common.read_json(os.path.join(root, "run_info.json"), {})
    info.update(kiln=kiln, kiln_version=(out or err).strip(), backends=sorted(set(info.get("backends", []) + backends)))
    common.write_json(os.path.join(root, "run_info.json"), info)
    say(f"run: {len(jobs)} jobs on {args.jobs} workers, {info['kiln_version']} ({kiln})")
    start = time.perf_counter()

    def one(job):
        _, name, backend, precision = job
        left = deadline.timeout(args.timeout)
        if left is None:
            return "deferred"
        if backend == "ort":
            cmd = [sys.executable, os.path.abspath(__file__), "_ort", "--dir", root, "--case", name]
            code, out, err, secs = common.run_process(cmd, left)
            res = common.read_json(os.path.join(root, name, "ort.json"))
            if res is None:
                if code is None and left < args.timeout:
                    return "deferred"
                res = {"case": name, "status": "error", "seconds": secs,
                       "error": f"timeout after {left:.0f} s" if code is None else common.first_error_line(err, code)}
                common.write_json(os.path.join(root, name, "ort.json"), res)
            judged = "pass" if res.get("pass") else "fail"
            return f"{res['status']:8s} {judged} {common.verdict(res) or ''}  {res.get('error', '')[:90]}"
        res = run_case.kiln_job(root, name, backend, precision, kiln, left)
        if res.get("status") == "timeout" and left < args.timeout:
            return "deferred"
        common.write_json(os.path.join(root, name, f"result_{backend}_{precision}.json"), res)
        return f"{res['status']:8s} {res['seconds']:6.1f} s {common.verdict(res) or ''}  {res.get('error', '')[:90]}"

    counts = {}
    for job, result in pool(args.jobs, jobs, one):
        tag = "onnxruntime" if job[2] == "ort" else f"{job[2]} {job[3]}"
        say(f"  {job[1]:55s} {tag:11s} {result}")
        key = (tag, (result or "error").split()[0])
        counts[key] = counts.get(key, 0) + 1
    say(f"run: {sorted(counts.items())} in {time.perf_counter() - start:.0f} s")


def kiln_jobs(backends, precisions=("fp32", "fp16")):
    """The (backend, precision) pairs a case runs: the cpu reference backend is fp32 only."""
    return [(b, p) for b in backends for p in precisions if not (b == "cpu" and p != "fp32")]


def result_files(backends):
    """The files a finished case holds: onnxruntime's result and one per kiln job."""
    return ["ort.json"] + [f"result_{b}_{p}.json" for b, p in kiln_jobs(backends)]


def finished(folder, backends):
    return all(os.path.exists(os.path.join(folder, f)) for f in result_files(backends))


def cmd_prune(args):
    """Deletes the ONNX files of cases whose every job has a result: a long pass on one machine
    keeps its disk for the cases still to run. The small result files stay for the report."""
    root = os.path.abspath(args.dir)
    backends = [b for b in args.backends.split(",") if b]
    freed = 0
    for name, _ in exported_cases(root, None):
        folder = os.path.join(root, name)
        if finished(folder, backends):
            for f in ("model.onnx", "model.onnx.data"):
                path = os.path.join(folder, f)
                if os.path.exists(path):
                    freed += os.path.getsize(path)
                    os.remove(path)
    say(f"prune: {freed / 1e9:.1f} GB of finished cases' models deleted")


def cmd_left(args):
    """One line saying what the zoo still has to do: cases to export and cases to run."""
    root = os.path.abspath(args.dir)
    backends = [b for b in args.backends.split(",") if b]
    to_export = to_run = 0
    for name, _ in select_cases(args):
        meta = common.read_json(os.path.join(root, name, "meta.json"))
        if meta is None or meta.get("status") not in DONE_EXPORT:
            to_export += 1
        elif meta.get("status") == "exported" and not finished(os.path.join(root, name), backends):
            to_run += 1
    say(f"left: {to_export} cases to export, {to_run} cases to run")


def cmd_resume(args):
    """Seeds a fresh machine's zoo folder with an earlier machine's results.tgz: finished cases
    and export failures stay done; a case exported there but not finished is dropped, since its
    model did not travel, and is exported again."""
    import tarfile

    root = os.path.abspath(args.dir)
    os.makedirs(root, exist_ok=True)
    with tarfile.open(args.tgz) as tar:
        tar.extractall(root, filter="data")
    backends = [b for b in args.backends.split(",") if b]
    dropped = 0
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        meta = common.read_json(os.path.join(folder, "meta.json"))
        if meta and meta.get("status") == "exported" and not finished(folder, backends) \
                and not os.path.exists(os.path.join(folder, "model.onnx")):
            shutil.rmtree(folder)
            dropped += 1
    say(f"resume: {args.tgz} unpacked into {root}; {dropped} unfinished cases to export again")


def cmd_ort(args):
    import run_case

    run_case.ort_one(args.dir, args.case)


# ---------------------------------------------------------------- report / list

def cmd_report(args):
    import report

    text = report.render(os.path.abspath(args.dir), args.device)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    say(f"report: {args.out}")


def cmd_fixture(args):
    import fixture

    say(fixture.make_fixture(os.path.abspath(args.dir), args.case, args.out, args.node, args.max_kb))


def cmd_list(args):
    for name, spec in select_cases(args):
        say(f"{name:60s} {spec.family}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    cpus = os.cpu_count() or 1

    e = sub.add_parser("export", help="export every case to ONNX with PyTorch's reference outputs")
    e.add_argument("--out", required=True)
    e.add_argument("--filter", help="regex on case names (<family>.<model>__<exporter>-<static|dynamic>)")
    e.add_argument("--jobs", type=int, default=cpus)
    e.add_argument("--exporters", default="dynamo,legacy")
    e.add_argument("--max-params", type=float, default=150e6, help="skip (and record) larger models; 0: no limit")
    e.add_argument("--timeout", type=float, default=300, help="seconds per case")
    e.add_argument("--budget", type=float, default=0, help="seconds for the whole invocation (0: none)")
    e.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    e.add_argument("--retry-failed", action="store_true", help="export again the cases that failed")
    e.add_argument("--shard", help="K/N: only every N-th case of the full list, from the K-th (one machine's part)")
    e.set_defaults(fn=cmd_export)

    l = sub.add_parser("list", help="list the cases")
    l.add_argument("--filter")
    l.add_argument("--exporters", default="dynamo,legacy")
    l.add_argument("--shard")
    l.set_defaults(fn=cmd_list)

    r = sub.add_parser("run", help="run kiln (and onnxruntime) on every exported case")
    r.add_argument("--dir", required=True)
    r.add_argument("--kiln", required=True)
    r.add_argument("--backends", default="cpu")
    r.add_argument("--precisions", default="fp32,fp16", help="fp16 runs on cuda only")
    r.add_argument("--jobs", type=int, default=cpus)
    r.add_argument("--timeout", type=float, default=300, help="seconds per job")
    r.add_argument("--budget", type=float, default=0, help="seconds for the whole invocation (0: none)")
    r.add_argument("--filter")
    r.add_argument("--redo", action="store_true", help="run again the jobs that have results")
    r.add_argument("--no-ort", action="store_true", help="skip onnxruntime")
    r.set_defaults(fn=cmd_run)

    o = sub.add_parser("report", help="write the Markdown results table")
    o.add_argument("--dir", required=True)
    o.add_argument("--out", required=True)
    o.add_argument("--device", default=None)
    o.set_defaults(fn=cmd_report)

    u = sub.add_parser("prune", help="delete the models of cases whose every job has a result")
    u.add_argument("--dir", required=True)
    u.add_argument("--backends", default="cpu,cuda")
    u.set_defaults(fn=cmd_prune)

    f = sub.add_parser("left", help="how many cases are still to export and to run")
    f.add_argument("--dir", required=True)
    f.add_argument("--filter")
    f.add_argument("--shard")
    f.add_argument("--exporters", default="dynamo,legacy")
    f.add_argument("--backends", default="cpu,cuda")
    f.set_defaults(fn=cmd_left)

    m = sub.add_parser("resume", help="seed a fresh folder with an earlier machine's results.tgz")
    m.add_argument("--dir", required=True)
    m.add_argument("--tgz", required=True)
    m.add_argument("--backends", default="cpu,cuda")
    m.set_defaults(fn=cmd_resume)

    x = sub.add_parser("fixture", help="a small regression fixture (tests/data/zoo layout) from a case")
    x.add_argument("--dir", required=True)
    x.add_argument("--case", required=True)
    x.add_argument("--out", required=True, help="e.g. tests/data/zoo/<name>")
    x.add_argument("--node", help="cut the graph around this node (its inputs and outputs)")
    x.add_argument("--max-kb", type=float, default=1024)
    x.set_defaults(fn=cmd_fixture)

    w = sub.add_parser("_export-one")
    w.add_argument("--out", required=True)
    w.add_argument("--case", required=True)
    w.add_argument("--max-params", type=float, default=0)
    w.add_argument("--threads", type=int, default=1)
    w.set_defaults(fn=cmd_export_one)

    t = sub.add_parser("_ort")
    t.add_argument("--dir", required=True)
    t.add_argument("--case", required=True)
    t.set_defaults(fn=cmd_ort)

    args = p.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()

"""The report step: one Markdown file from DIR/<case>/{meta,result_*,ort}.json."""

import datetime
import math
import os
import re

import common

ERR_WIDTH = 120


def _load(root):
    cases = []
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        meta = common.read_json(os.path.join(d, "meta.json"))
        if not meta:
            continue
        results = {}
        for f in sorted(os.listdir(d)):
            m = re.fullmatch(r"result_(\w+)_(fp\d+|bf16)\.json", f)
            if m:
                results[(m.group(1), m.group(2))] = common.read_json(os.path.join(d, f)) or {}
        cases.append({"name": name, "meta": meta, "results": results, "ort": common.read_json(os.path.join(d, "ort.json"))})
    return cases


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _trunc(text, n=ERR_WIDTH):
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


_sci = common.sci


def normalize(error):
    """A grouping key: quoted names, numbers and paths made alike so one bug groups its models."""
    e = re.sub(r"`[^`]*`", "`…`", error)
    e = re.sub(r"'[^']*'", "'…'", e)
    e = re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", e)
    return _trunc(e, 160)


def _order(backend, precision):
    return ({"cpu": 0, "cuda": 1}.get(backend, 2), {"fp32": 0, "fp16": 1}.get(precision, 2), precision)


def _shapes(meta):
    shapes = meta.get("input_shapes") or {}
    dims = ", ".join("x".join(str(d) for d in s) for s in shapes.values())
    kind = "dyn" if meta.get("shape_kind") == "dynamic" else "static"
    if kind == "dyn" and meta.get("status") == "exported" and not meta.get("batch_symbolic", True):
        kind = "dyn→static"  # the exporter specialized the batch (Dim.AUTO fallback)
    return f"{kind} {dims}".strip()


def _result_cell(r):
    if not r:
        return "-"
    st = r.get("status")
    if st in ("pass", "fail"):
        mark = "✓" if st == "pass" else "✗"
        # Results from before the fp64 rule have no verdict: rel-L2 / max-abs vs fp32 then.
        return f"{mark} {common.verdict(r) or _sci(r.get('rel_l2')) + ' / ' + _sci(r.get('max_abs'))}"
    if st == "timeout":
        return "⏱ timeout"
    return f"✗ {r.get('stage', 'error')} error"


def _ort_cell(o):
    if not o:
        return "-"
    if o.get("status") == "error" or "pass" not in o:  # failed, or an ort.json from before the rule
        return o.get("status") if o.get("status") != "ok" else _sci(o.get("rel_l2"))
    return f"{'✓' if o['pass'] else '✗'} {common.verdict(o)}"


def _own_cell(meta):
    """PyTorch fp32's own error vs fp64: the worst float output's rel L2, and the share of integer
    elements that differ where any do (detection labels)."""
    own = meta.get("torch_fp32_error")
    if own is None:
        return "fp64 failed" if meta.get("torch_fp64_failed") else "-"
    ints = set(meta.get("integer_outputs") or [])
    floats = [v for k, v in own.items() if k not in ints and v is not None]
    text = _sci(max(floats)) if floats else "-"
    diff = {k: v for k, v in own.items() if k in ints and v}
    text += "".join(f"; {k} {100 * v:.0f}% differ" for k, v in diff.items())
    if any(v is None for v in own.values()):
        text += "; some not comparable"
    return text


def passes_ort(o):
    if "pass" in o:
        return o["pass"]
    return o.get("status") == "ok" and o.get("rel_l2", 1) <= common.FP32_TOL


def torch_fp16_non_finite(case):
    """Whether PyTorch's own fp16 run of the case gave non-finite outputs (its error is inf)."""
    own = case["meta"].get("torch_fp16_rel_l2")
    return own is not None and not math.isfinite(own)


def render(root, device=None):
    cases = _load(root)
    combos = sorted({k for c in cases for k in c["results"]}, key=lambda k: _order(*k))
    exported = [c for c in cases if c["meta"].get("status") == "exported"]
    failed_export = [c for c in cases if c["meta"].get("status") == "export_failed"]
    skipped = [c for c in cases if c["meta"].get("status") == "skipped"]
    versions = next((c["meta"].get("versions") for c in cases if c["meta"].get("versions")), {})
    run_info = common.read_json(os.path.join(root, "run_info.json"), {})
    if device is None:
        device = next((c["meta"].get("cuda_device") for c in cases if c["meta"].get("cuda_device")), "cpu only")
    L = ["# kiln model zoo results", ""]
    L.append(f"- date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}; device: {device}")
    L.append("- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items())
             + (f"; kiln: {run_info.get('kiln_version')}" if run_info.get("kiln_version") else ""))
    models = {c["meta"].get("model") for c in cases}
    L.append(f"- combinations: {len(cases)} ({len(models)} models); PyTorch exported: {len(exported)}; "
             f"PyTorch export failed: {len(failed_export)}; skipped: {len(skipped)}")
    for b, p in combos:
        ran = [c["results"].get((b, p)) for c in exported if c["results"].get((b, p))]
        passed = sum(1 for r in ran if r.get("status") == "pass")
        imported = sum(1 for r in ran if r.get("import_ok"))
        pct = 100.0 * passed / len(exported) if exported else 0.0
        line = (f"- **{b} {p}**: {passed}/{len(exported)} pass ({pct:.1f}% of exported; {len(ran)} ran, "
                f"{imported} imported)")
        if p == "fp16":
            # PyTorch's own fp16 run overflows to inf/NaN on these: no finite answer to be within 3× of.
            moot = [c for c in exported if torch_fp16_non_finite(c) and c["results"].get((b, p), {}).get("status") != "pass"]
            judged = len(exported) - len(moot)
            if moot:
                line += (f"; {passed}/{judged} ({100.0 * passed / max(judged, 1):.1f}%) of the cases where PyTorch's "
                         f"own fp16 answer is finite — on {len(moot)} ({', '.join(sorted({c['meta'].get('model', c['name']) for c in moot}))}) "
                         f"PyTorch fp16 itself gives inf/NaN, as kiln does")
        L.append(line)
    ort = [c["ort"] for c in exported if c["ort"]]
    ort_ok = sum(1 for o in ort if passes_ort(o))
    L.append(f"- onnxruntime (CPU) passes the fp32 rule: {ort_ok}/{len(ort)} ran")
    L.append("")
    L.append("Rules. Where PyTorch's float64 answer exists (expected_fp64.npz), it is the reference: "
             "fp32: kiln's error vs PyTorch fp64 ≤ max(1e-4, 3 × PyTorch fp32's own error vs fp64) per "
             "output (or the model's documented floor, if larger); fp16: ≤ max(1e-3, 3 × PyTorch fp16's "
             "own error vs fp64), 1e-2 where PyTorch has no fp16 result. Error: relative L2 for float "
             "outputs, the fraction of differing elements for integer ones (tolerance 3 × PyTorch's own "
             "fraction: 0 when PyTorch fp32 matches fp64 exactly). So each tolerance is PyTorch's own "
             "error on that model with those random weights: deep random-weight nets are ill-conditioned, "
             "and no fp32 engine (onnxruntime included) lands nearer than PyTorch itself. Without an fp64 "
             "reference: rel L2 vs PyTorch fp32 ≤ 1e-4, integer outputs exact.")
    L.append("")
    L.append("Cells: the worst output's error vs the reference ≤ (or >) its tolerance; `vs fp32` where it "
             "was judged against PyTorch fp32. The onnxruntime column: the same fp32 rule applied to "
             "onnxruntime (CPU).")
    L.append("")

    # Failures grouped by first error message.
    groups = {}
    for c in exported:
        for (b, p), r in c["results"].items():
            if r.get("status") in ("pass", None):
                continue
            key = normalize(r.get("error", "?")) if r.get("status") != "fail" else "numerical mismatch beyond tolerance"
            g = groups.setdefault(key, {"cases": [], "combos": set(), "example": r.get("error", "")})
            g["cases"].append(c["name"])
            g["combos"].add(f"{b} {p}")
    L += ["## kiln failures grouped by first error message", ""]
    if groups:
        L += ["| cases | backend/precision | message (normalized) | example | models |", "|---:|---|---|---|---|"]
        for key, g in sorted(groups.items(), key=lambda kv: -len(kv[1]["cases"])):
            names = sorted(set(g["cases"]))
            shown = ", ".join(names[:8]) + (f", … (+{len(names) - 8})" if len(names) > 8 else "")
            L.append(f"| {len(g['cases'])} | {', '.join(sorted(g['combos']))} | {_cell(key)} | "
                     f"{_cell(_trunc(g['example']))} | {_cell(shown)} |")
    else:
        L.append("None.")
    L.append("")

    if failed_export or skipped:
        L += ["## PyTorch export failures and skipped cases", "", "| case | status | reason |", "|---|---|---|"]
        for c in failed_export + skipped:
            L.append(f"| {c['name']} | {c['meta']['status']} | {_cell(_trunc(c['meta'].get('error', ''), 200))} |")
        L.append("")

    L += _exporter_section(exported)

    L += ["## All cases", ""]
    head = ["model", "family", "exporter", "shapes", "import"] + [f"{b} {p}" for b, p in combos] + \
        ["torch fp32 vs fp64", "onnxruntime", "pass", "first error"]
    L.append("| " + " | ".join(head) + " |")
    L.append("|" + "---|" * len(head))
    for c in cases:
        m = c["meta"]
        rs = [c["results"].get(k) for k in combos]
        ran = [r for r in rs if r]
        if m.get("status") != "exported":
            imp, verdict = "-", "export failed" if m.get("status") == "export_failed" else "skipped"
            err = m.get("error", "")
        else:
            oks = [r.get("import_ok") for r in ran]
            imp = "✓" if oks and all(oks) else ("✗" if any(o is False for o in oks) else "?")
            npass = sum(1 for r in ran if r.get("status") == "pass")
            verdict = "-" if not ran else ("✓" if npass == len(ran) else f"✗ {npass}/{len(ran)}")
            err = next((r.get("error") for r in ran if r.get("status") != "pass" and r.get("error")), "")
        row = [m.get("model", ""), m.get("family", ""), m.get("exporter", ""), _shapes(m), imp] + \
            [_result_cell(r) for r in rs] + [_own_cell(m), _ort_cell(c["ort"]), verdict, _trunc(err)]
        L.append("| " + " | ".join(_cell(x) for x in row) + " |")
    L.append("")
    noted = ("dynamic_fallback", "tolerance_note", "inputs_dropped_by_exporter", "torch_fp64_failed",
             "torch_fp32_vs_fp64_problems", "fp64_outputs_not_float64")
    notes = [c for c in exported if c["meta"].get("rms_ok") is False or any(c["meta"].get(k) for k in noted)]
    if notes:
        L += ["## Notes on cases", ""]
        for c in notes:
            m, bits = c["meta"], []
            if m.get("rms_ok") is False:
                bits.append(f"reference RMS {m.get('min_ref_rms')} ≤ 1e-6: degenerate output")
            if m.get("dynamic_fallback"):
                bits.append(f"strict dynamic batch failed ({_trunc(m.get('dynamic_strict_error', ''), 100)}); "
                            f"exported with {m['dynamic_fallback']}, batch symbolic: {m.get('batch_symbolic')}")
            if m.get("tolerance_note"):
                bits.append(m["tolerance_note"])
            if m.get("inputs_dropped_by_exporter"):
                bits.append(f"exporter dropped inputs {m['inputs_dropped_by_exporter']}")
            if m.get("torch_fp64_failed"):
                bits.append(f"PyTorch float64 failed ({_trunc(m['torch_fp64_failed'], 100)}): judged vs fp32")
            for out, why in (m.get("torch_fp32_vs_fp64_problems") or {}).items():
                bits.append(f"PyTorch fp32 vs fp64 `{out}`: {why}: that output judged vs fp32")
            if m.get("fp64_outputs_not_float64"):
                bits.append(f"float64 run left {m['fp64_outputs_not_float64']} in float32")
            L.append(f"- {c['name']}: " + "; ".join(_cell(b) for b in bits))
        L.append("")
    return "\n".join(L)


def _exporter_section(exported):
    """Per model: ONNX nodes and kiln layers (before passes → in the engine) of each exported case; a
    flag where the exporters' engines differ in layer count (same shape kind where both exist)."""
    by_model = {}
    for c in exported:
        by_model.setdefault(c["meta"]["model"], []).append(c)
    L = ["## Exporters compared: kiln engine layers after passes", "",
         "Each case: ONNX nodes / kiln layers before passes → in the engine (fp32 build; cpu where it ran). "
         "**yes**: the two exporters' engines differ in layer count at the same shape kind.", "",
         "| model | dynamo | legacy | differ |", "|---|---|---|---|"]
    rows = 0
    for model, cs in sorted(by_model.items()):
        if {c["meta"]["exporter"] for c in cs} != {"dynamo", "legacy"}:
            continue
        cells = {"dynamo": [], "legacy": []}
        after = {}
        for c in sorted(cs, key=lambda c: c["meta"]["shape_kind"]):
            r = _layer_result(c)
            kind = c["meta"]["shape_kind"]
            if r and r.get("layers_after") is not None:
                after[(c["meta"]["exporter"], kind)] = r["layers_after"]
                text = f"{kind}: {c['meta'].get('node_count')} / {r['layers_before']} → {r['layers_after']}"
            else:
                text = f"{kind}: {c['meta'].get('node_count')} / not built"
            cells[c["meta"]["exporter"]].append(text)
        same_kind = [k for k in ("static", "dynamic") if ("dynamo", k) in after and ("legacy", k) in after]
        if same_kind:
            differ = [k for k in same_kind if after[("dynamo", k)] != after[("legacy", k)]]
            flag = ("**yes** (" + ", ".join(differ) + ")") if differ else "no"
        else:
            d = [v for (e, _), v in after.items() if e == "dynamo"]
            g = [v for (e, _), v in after.items() if e == "legacy"]
            flag = "-" if not (d and g) else ("differs (dynamic vs static: not comparable)" if set(d) != set(g)
                                              else "no")
        L.append(f"| {model} | {'; '.join(cells['dynamo'])} | {'; '.join(cells['legacy'])} | {flag} |")
        rows += 1
    if not rows:
        L.append("| (no model exported by both exporters) | | | |")
    return L + [""]


def _layer_result(c):
    for key in sorted(c["results"], key=lambda k: _order(*k)):
        r = c["results"][key]
        if key[1] == "fp32" and r.get("layers_after") is not None:
            return r
    return None

"""``cube explain``: why two protocol slices' scores differ, item by item, in named factors.

cube explain STORE_A[:SELECT] STORE_B[:SELECT] [--json] [--bootstrap B] [--seed S]
             [--subjects N] [--allow-incomplete] [--no-verify]

SELECT is FIELD=VALUE terms joined by commas, FIELD one of model, scorer, label_set, context,
shots, order (record fields: they must leave one protocol cell; a VALUE ending in * is a prefix,
whose cells are one slice where they hold one record per item, e.g. OpenCompass's context per
subject: context=oc-ppl-*) and agg (micro, the default, or macro: how that side's score
averages; harness: the way that side's harness averages the number it reports). For example::

    cube explain data/records:model=smollm2-135m-instruct,scorer=M1-seq,label_set=L1_halfwidth,context=zh_cue,shots=0 \\
                 data/imported/lm-eval-smollm2:scorer=M1-seq,context=zh_cue,label_set=L1_halfwidth

The two slices may be two cells of one store, two imports, or an import against ``cube run``.
An incomplete store is refused unless ``--allow-incomplete``.
"""

from __future__ import annotations

import argparse
import json
import sys

from cube.commands.extras import declare
from cube.commands.store_options import add_allow_incomplete, incomplete_warnings


# The replicates are kept as one float64 array, and each draws every item: 10**9 asked for 7.45 GiB
# before one was drawn; 10x the default bounds both memory and time.
MAX_BOOTSTRAP = 100_000


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "explain", help="why two slices' scores differ: items, paired test, the gap in named factors",
        description=__doc__.splitlines()[0])
    parser.add_argument("slice_a", metavar="STORE_A[:SELECT]")
    parser.add_argument("slice_b", metavar="STORE_B[:SELECT]")
    parser.add_argument("--bootstrap", type=int, default=10_000, metavar="B",
                        help="item-clustered bootstrap replicates of the gap (default 10000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--subjects", type=int, default=10, metavar="N",
                        help="subjects shown in the table, largest share first (default 10; --json has all)")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip the sha256 check of each file against the manifest")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_allow_incomplete(parser)
    parser.set_defaults(func=run)
    declare(parser, ("pyarrow",))


def _pct(x: float) -> str:
    return f"{100 * x:+.2f} pp"


def format_explanation(data: dict, subjects: int = 10) -> str:
    """The table a reader reads: the items, the paired test, the factors, the subjects."""
    a, b, items, paired = data["a"], data["b"], data["items"], data["paired"]
    lines = []
    for name, side in (("A", a), ("B", b)):
        c = {k: ("-" if v is None else v) for k, v in side["cell"].items()}  # a generation slice has no label set
        lines.append(f"{name}: {c['model']} | {c['scorer']} | {c['label_set']} | {c['context']} | "
                     f"{c['shots']}-shot | {c['order']} ({c['benchmark']}), {side['aggregation']}: "
                     f"{side['score']['value']:.4f} on {side['items']} items")
    lines.extend(data.get("warnings") or [])
    lines.append(f"gap B - A: {_pct(data['gap']['value'])} (exactly {data['gap']['exact']})")
    lines.append(f"items: {items['both']} in both, {items['only_a']} only in A, {items['only_b']} only in B")
    boot = paired["bootstrap_b_minus_a"]
    lines.append(f"paired on the {items['both']} common items: both right {paired['both_right']}, only A "
                 f"{paired['only_a']}, only B {paired['only_b']}, both wrong {paired['both_wrong']}; exact "
                 f"McNemar p = {paired['mcnemar_p']:.3g}; B - A {_pct(boot['delta'])}, 95% item-clustered "
                 f"bootstrap [{_pct(boot['lo'])}, {_pct(boot['hi'])}] (B={boot['B']})")
    if data["max_score_difference"] is not None:
        lines.append(f"one scorer on byte-equal prompts: the largest |score A - score B| of an option on a common item "
                     f"is {data['max_score_difference']:.3g}")
    lines.append("")
    lines.append(f"{'factor':<21} {'share':>10} {'range over path orders':>23} {'flips':>5}  status")
    for f in data["factors"]:
        spread = f"[{_pct(f['order_low']['value'])}, {_pct(f['order_high']['value'])}]"
        lines.append(f"{f['name']:<21} {_pct(f['share']['value']):>10} {spread:>23} {f['items']:>5}  {f['status']}")
        if f["detail"]:
            lines.append(f"{'':<21}   {f['detail']}")
    lines.append(f"{'sum':<21} {_pct(sum(f['share']['value'] for f in data['factors'])):>10}  "
                 "(the path sample -> aggregation -> outcomes; the factors sum to the gap exactly)")
    lines.append("(range over path orders: the least and greatest share over every order of the factors on the "
                 "path; flips: common items whose right/wrong the factor changes, so items only in A or B count "
                 "under sample's detail, not here)")
    if data["prompt_diff"]:
        lines.append("")
        lines.append("prompt, placeholders for the item's text (changed lines, A then B):")
        lines.extend(f"  {line}" for line in data["prompt_diff"])
    lines.append("")
    lines.append("subjects carrying the outcome part of the gap (largest first):")
    lines.append(f"  {'subject':<36} {'n A':>4} {'n B':>4} {'both':>4} {'acc A':>6} {'acc B':>6} "
                 f"{'A-only':>6} {'B-only':>6} {'share':>10}")
    carrying = [s for s in data["subjects"] if s["carried"]["exact"] != "0/1" or s["only_a_right"] or s["only_b_right"]]
    if not carrying:
        lines.append("  none: no common item changes its outcome")
    for s in carrying[:subjects]:
        acc_a = "-" if s["acc_a"] is None else f"{s['acc_a']:.3f}"
        acc_b = "-" if s["acc_b"] is None else f"{s['acc_b']:.3f}"
        lines.append(f"  {s['subject']:<36} {s['n_a']:>4} {s['n_b']:>4} {s['n_common']:>4} {acc_a:>6} {acc_b:>6} "
                     f"{s['only_a_right']:>6} {s['only_b_right']:>6} {_pct(s['carried']['value']):>10}")
    if len(carrying) > subjects:
        lines.append(f"  ... {len(carrying) - subjects} more (--subjects N, or --json)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from cube.analysis.explain import explain_slices, explanation_json
    from cube.analysis.explain_selectors import parse_slice
    from cube.errors import ConfigError
    from cube.records.store import read_manifest

    spec_a, spec_b = parse_slice(args.slice_a), parse_slice(args.slice_b)
    if not 1 <= args.bootstrap <= MAX_BOOTSTRAP:
        raise ConfigError(f"--bootstrap {args.bootstrap}: needs 1 to {MAX_BOOTSTRAP:,} replicates (the default "
                          "10,000 already gives the 95% interval to about 0.1 pp)")
    if not 0 <= args.seed < 2**32:
        raise ConfigError(f"--seed {args.seed}: needs a whole number from 0 to {2**32 - 1} (numpy's seed range)")
    if args.subjects < 0:
        raise ConfigError(f"--subjects {args.subjects}: needs 0 or more")
    for spec in (spec_a, spec_b):
        read_manifest(spec.store)  # a missing or malformed store is named before any record is read
    explanation = explain_slices(spec_a, spec_b, allow_incomplete=args.allow_incomplete,
                                 verify=not args.no_verify, B=args.bootstrap, seed=args.seed)
    data = explanation_json(explanation)
    # read at all only with --allow-incomplete: the mark goes with the numbers, as rescore's does
    incomplete = [w for store in dict.fromkeys((spec_a.store, spec_b.store)) for w in incomplete_warnings(store)]
    for warning in incomplete:
        print(warning, file=sys.stderr)
    if args.json:
        print(json.dumps(data | {"warnings": data["warnings"] + incomplete}, ensure_ascii=False, indent=1))
    else:
        print(format_explanation(data, args.subjects))
        for warning in incomplete:
            print(warning)
    return 0

"""The shape of every `--format json` output: one versioned JSON Schema (draft 2020-12) per kind.

This module is the one definition the commands and the docs share. A command prints its report
with `emit(kind, obj)`, which puts `{"schema": "kernelforge.<kind>", "schema_version": N}` first;
`python -m kernelforge.cli.json_schemas --markdown > docs/json-schemas.md` writes the reference
page (tests/cli/test_json_schemas.py checks that the committed page is the generated one, that
every command's output validates against its schema, and that every `--format json` option of
the CLI has a kind here).

The conventions a consumer may rely on are CONVENTIONS below (also on the page).

Pure Python data: importing it costs nothing (`cache ls` imports it).
"""
from __future__ import annotations

import json
import sys
from typing import Any, Mapping, NamedTuple

DRAFT = "https://json-schema.org/draft/2020-12/schema"
PREFIX = "kernelforge."
HEADER_KEYS = ("schema", "schema_version")
CONVENTIONS = """\
* Keys are snake_case and fixed: objects are closed (`additionalProperties: false`) except the
  maps whose keys are data (variant axes, toolchain versions, key ids, ops), which say so.
  Enumerated values are lowercase snake_case too (`up_to_date`, `passed_over`, `differs`).
* `schema_version` of a kind goes up whenever its schema changes (a key added, removed or
  renamed, a type or meaning changed); a consumer checks `schema` and `schema_version` and
  refuses versions it does not know.
* Exit codes are unchanged by --format json. A command that cannot produce its report (a user
  error, exit 2; a source rejected as a whole, exit 1) prints one `error: ...` line on stderr and
  nothing on stdout; every other outcome prints exactly one document on stdout (progress and
  notes go to stderr).
"""


class Kind(NamedTuple):
    version: int
    commands: tuple[str, ...]  # how to get it, e.g. "kernelforge cache ls --format json"
    description: str
    body: dict[str, Any]  # the schema of the document without its header


# ---- building blocks ----

def _t(type_: str | list[str], description: str, **more: Any) -> dict[str, Any]:
    return {"type": type_, "description": description, **more}


def _str(d: str) -> dict[str, Any]:
    return _t("string", d)


def _int(d: str) -> dict[str, Any]:
    return _t("integer", d, minimum=0)


def _num(d: str) -> dict[str, Any]:
    return _t("number", d)


def _bool(d: str) -> dict[str, Any]:
    return _t("boolean", d)


def _enum(d: str, *values: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(values), "description": d}


def _strs(d: str) -> dict[str, Any]:
    return _t("array", d, items={"type": "string"})


def _array(d: str, item: dict[str, Any]) -> dict[str, Any]:
    return _t("array", d, items=item)


def _map(d: str, value: dict[str, Any] | None = None) -> dict[str, Any]:
    """An object whose keys are data (not part of the schema)."""
    return _t("object", d, additionalProperties=value if value is not None else True)


def _obj(d: str, props: dict[str, Any], *, optional: tuple[str, ...] = (), nullable: bool = False) -> dict[str, Any]:
    """A closed object: exactly these keys (those in `optional` may be absent)."""
    return {"type": ["object", "null"] if nullable else "object", "description": d, "properties": props,
            "required": [k for k in props if k not in optional], "additionalProperties": False}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    out = dict(schema)
    out["type"] = [out["type"], "null"] if isinstance(out["type"], str) else [*out["type"], "null"]
    return out


# ---- shared parts ----

ROOT = _str("the cache root (absolute path)")
ROOT_SOURCE = _str("where the root came from: --cache, $KERNELFORGE_CACHE_DIR, checkout, user (or wheel)")

LAYER = {
    "root": ROOT,
    "source": _str("where the layer came from: --cache, $KERNELFORGE_CACHE_DIR, checkout, user or wheel"),
    "label": _str("the layer's name in text output (a wheel's distribution, or the source)"),
    "writable": _bool("whether this process may write the layer"),
    "refused": _nullable(_str("why the runtime serves nothing of this layer (a kernel wheel); null: it is used")),
    "signer": _nullable(_str("the key id that signed a kernel wheel; null: unsigned or not a wheel")),
}

ENTRY = _obj("a cache entry (its meta.json) and the layer that serves it", {
    "key": _str("the cache key (sha256 of the variant, kernel sources and toolchain)"),
    "kind": _enum("what the entry holds", "kernel", "runtime", "tuning"),
    "op": _str("the op (runtime, tuning for those kinds)"),
    "name": _str("the variant name"),
    "variant": _map("the canonical variant: axes, K-class, op"),
    "arch": _str("the GPU arch (host for a runtime library)"),
    "toolchain_id": _str("the toolchain's id"),
    "toolchain": _map("the toolchain's versions"),
    "source_hash": _str("the hash of the op's kernel sources (empty for runtime libraries and tuning tables)"),
    "files": _map("file path in the entry -> its sha256 and size",
                  _obj("one file", {"sha256": _str("the file's sha256"), "size": _int("the file's bytes")})),
    "main_file": _str("the file the runtime loads"),
    "build_time_s": _num("compile time in seconds"),
    "created": _str("when it was built (ISO 8601)"),
    "path": _str("the entry directory, relative to the schema root v1/"),
    "extra": _map("further metadata: symbol, runtime_key, dispatch, origin (via, from, signer) ..."),
    "layer": _str("the label of the layer that serves it"),
})

GC_BODY = {
    "root": ROOT,
    "bytes_before": _int("bytes under the root before"),
    "bytes_after": _int("bytes under the root after (with dry_run: what would be left)"),
    "max_size": _nullable(_int("the size limit applied, bytes; null: none")),
    "older_than_s": _nullable(_int("the age limit applied, seconds; null: none")),
    "removed": _array("evicted entries, in eviction order", _obj("an evicted entry", {
        "name": _str("variant name"), "key": _str("cache key"), "kind": _str("entry kind"), "op": _str("op"),
        "arch": _str("arch"), "bytes": _int("bytes of its directory"),
        "last_use": _int("last use, unix time (its build time without usage records)"),
        "why": _str("why it was evicted")})),
    "kept": _int("entries kept"),
    "over_limit": _bool("still over max_size: what is left is protected, tuning tables or linked runtime libraries"),
    "dry_run": _bool("nothing was removed"),
}

STATS_BODY = {
    "root": ROOT,
    "cache_schema": _int("the cache layout's schema version (the v1 of v1/)"),
    "entries": _int("entries in the index"),
    "bytes": _int("the entries' recorded file sizes"),
    "orphans": _int("directories that are not entries (debris)"),
    "stale": _nullable(_int("kernels this kernelforge never serves; null: not checked (no build toolchain)")),
    "tree_bytes": _int("every file under the root (what du --apparent-size counts)"),
    "disk_bytes": _int("allocated bytes (what du counts)"),
    "usage": _map("op -> advisory usage counters recorded by the runtime",
                  {"type": "object", "additionalProperties": {"type": "integer"}}),
    "by_kind_op_arch": _array("entries and bytes per (kind, op, arch)", _obj("one group", {
        "kind": _str("entry kind"), "op": _str("op"), "arch": _str("arch"), "entries": _int("entries"),
        "bytes": _int("bytes")})),
    "by_toolchain": _array("entries and bytes per toolchain", _obj("one toolchain", {
        "toolchain_id": _str("toolchain id"), "entries": _int("entries"), "bytes": _int("bytes")})),
}

VERIFY_BODY = {
    "root": ROOT,
    "ok": _bool("no problem found"),
    "entries": _int("entries checked"),
    "files": _int("files checked"),
    "problems": _array("what fails verification", _obj("one problem", {
        "key": _str("the entry's key (empty: not about one entry)"), "name": _str("the entry's name"),
        "problem": _str("what is wrong"), "file": _str("the file concerned (may be empty)"),
        "detail": _str("more detail (may be empty)")})),
    "orphans": _strs("debris: directories that are not entries (`cache clean` removes them)"),
    "signed": _map("key id -> arrived entries it signed (checked)", {"type": "integer"}),
    "unsigned": _strs("names of arrived entries accepted unsigned"),
}

TRANSFER_BODY = {
    "source": _str("where entries came from (cache root, remote URL or bundle)"),
    "dest": _str("where they went"),
    "ok": _bool("nothing was refused"),
    "selected": _int("entries selected"),
    "present": _strs("names the destination already held with the same bytes"),
    "transferred": _strs("names transferred and committed"),
    "refused": _array("entries refused", _obj("one refusal", {
        "key": _str("cache key"), "name": _str("variant name"), "reason": _str("why")})),
    "files": _int("files moved"),
    "bytes": _int("bytes moved"),
    "notes": _strs("notes (signatures, stray members, verify results)"),
    "dry_run": _bool("--dry-run: nothing was written; transferred, files and bytes are what would be"),
}

VERDICT = {
    "name": _str("variant name"), "key": _str("cache key"), "layer": _str("the layer holding it"),
    "arch": _str("arch"), "kclass": _str("K-class name"),
    "status": _enum("the verdict", "chosen", "rejected", "passed_over"),
    "why": _str("why"),
}

KCLASS = _obj("the K-class's parameters", {
    "name": _str("K-class name"), "k_multiple_blocks": _int("K is a multiple of this many scale blocks"),
    "vector_bytes": _int("pointer and row-stride alignment in bytes (0: none)"),
    "max_k": _int("largest K (0: unbounded)"), "elements": _int("elements per thread kept on chip (0: unused)"),
    "cluster": _int("CTAs sharing a row"), "m_multiple": _int("M is a multiple of this (only when set)"),
}, optional=("m_multiple",))


def _transfer(action: str, what: str) -> Kind:
    return Kind(1, (f"kernelforge cache {action} ... --format json",), what,
                {**_obj("", {"action": {"const": action, "description": "the transfer"}, **TRANSFER_BODY})})


# ---- the kinds ----

KINDS: dict[str, Kind] = {
    "build": Kind(1, ("kernelforge build --format json", "kernelforge build --dry-run --format json"),
                  "What a build did (or, with --dry-run, would do), variant by variant.", _obj("", {
                      "cache_root": ROOT,
                      "dry_run": _bool("--dry-run: nothing was built or written"),
                      "seconds": _num("wall time of the build"),
                      "runtime_built": _bool("the runtime library was built"),
                      "stale_removed": _int("staging dirs of dead builds removed"),
                      "replaced": _array("damaged entries quarantined and rebuilt", _obj("one", {
                          "name": _str("variant name"), "reason": _str("the damage")})),
                      "counts": _obj("variants per status", {
                          "built": _int("built"), "up_to_date": _int("already cached"),
                          "failed": _int("failed"), "would_build": _int("--dry-run: would be built")}),
                      "variants": _array("one per selected variant", _obj("one variant's outcome", {
                          "name": _str("variant name"),
                          "status": _enum("the outcome", "built", "up_to_date", "failed", "would_build"),
                          "key": _str("cache key"),
                          "seconds": _num("compile time"),
                          "peak_rss_mb": _num("the compile worker's peak RSS so far (0: not compiled here)"),
                          "reason": _str("why it was (or would be) built: the key ingredient that changed"),
                          "error": _str("the compiler message of a failure")})),
                      "tuning_tables": _array("tuning tables imported (empty with --dry-run)", _obj("one", {
                          "file": _str("the table file"), "outcome": _str("imported or up to date")})),
                      "gc": _obj("the size-limit eviction after the build; null: no limit (or --dry-run)",
                                 GC_BODY, nullable=True),
                  })),
    "build_reproducible": Kind(
        1, ("kernelforge build --check-reproducible --format json",),
        "A rebuilt sample of cached artifacts compared byte for byte with the cache.", _obj("", {
            "cache_root": ROOT,
            "ok": _bool("every artifact rebuilt to the same bytes"),
            "sample": _int("--sample: variants asked for"),
            "cached": _int("selected variants that are cached"),
            "seconds": _num("wall time"),
            "counts": _obj("artifacts per status", {"ok": _int("same bytes"), "differs": _int("other bytes"),
                                                    "failed": _int("rebuild failed")}),
            "results": _array("one per artifact (the sampled variants, then the runtime library)", _obj("one", {
                "name": _str("variant name"), "key": _str("cache key"),
                "status": _enum("the verdict", "ok", "differs", "failed"),
                "cached_sha256": _str("sha256 of the cached main file (empty: none)"),
                "rebuilt_sha256": _str("sha256 of the rebuilt main file (empty: none)"),
                "detail": _str("which files differ, or why it failed")})),
        })),
    "explain_variants": Kind(
        1, ("kernelforge explain VARIANT_GLOB --format json",),
        "Whether each variant matching the glob is cached and, if not, what changed against the nearest build.",
        _obj("", {"variants": _array("one per matching variant", _obj("one variant", {
            "name": _str("variant name"), "key": _str("its cache key with this toolchain and these sources"),
            "cached": _bool("a layer serves it"),
            "layer": _nullable(_str("the layer serving it; null: a miss")),
            "reason": _str("what the verdict rests on"),
            "diff": _strs("key ingredients that differ from the nearest cached build"),
            "refused": _strs("refused layers that hold it (never served)"),
            "nearest": _obj("the nearest cached build (only on a miss with one)", {
                "name": _str("its name"), "key": _str("its key")}),
        }, optional=("nearest",)))})),
    "explain_call": Kind(
        1, ("kernelforge explain OP KEY=VALUE... --format json",),
        "Which cached build serves a call, with a verdict for every candidate.", _obj("", {
            "op": _str("the op"),
            "coords": _map("the dispatch coordinates of the call (axis -> value)"),
            "capability": _t("array", "the device capability (major, minor)", items={"type": "integer"},
                             minItems=2, maxItems=2),
            "k": _int("K"), "m": _int("M"),
            "chosen": _obj("the build that serves the call; null: a miss", VERDICT, nullable=True),
            "how": _str("how it was chosen (tuning table and M bucket, or the heuristic)"),
            "miss": _str("why nothing serves it (empty when served)"),
            "candidates": _array("every cached build of the group", _obj("one candidate", VERDICT)),
            "staged": _nullable(_str("the note when linear scales are staged through the swizzled build")),
        })),
    "specs_show": Kind(
        1, ("kernelforge specs show --format json",),
        "Every variant the spec files enumerate.", _obj("", {
            "count": _int("variants"),
            "spec_files": _strs("the spec files read"),
            "variants": _array("one per variant", _obj("one variant", {
                "name": _str("variant name"), "symbol": _str("its exported symbol"), "op": _str("op"),
                "spec_file": _str("the spec file declaring it"), "axes": _map("axis -> value"),
                "kclass": KCLASS})),
        })),
    "cache_dir": Kind(
        1, ("kernelforge cache dir --format json",),
        "The cache root the commands use (it need not exist yet).", _obj("", {
            "root": ROOT, "root_source": ROOT_SOURCE,
        })),
    "cache_ls": Kind(
        1, ("kernelforge cache ls --format json",),
        "The entries of every layer (or of --cache alone), each with the layer that serves it.", _obj("", {
            "root": ROOT, "root_source": ROOT_SOURCE,
            "layers": _array("the layers read, in order", _obj("one layer", LAYER)),
            "shadowed": _int("entries hidden by the same key in an earlier layer"),
            "entries": _array("the served entries", ENTRY),
        })),
    "cache_stats": Kind(
        1, ("kernelforge cache stats --format json",),
        "Totals and groups of the first layer, then of every layer.", _obj("", {
            **STATS_BODY, "root_source": ROOT_SOURCE,
            "layers": _array("every layer", _obj("one layer's statistics", {**LAYER, **STATS_BODY})),
        })),
    "cache_verify": Kind(
        1, ("kernelforge cache verify --format json",),
        "Verification of the first layer, then of every layer (exit 1 if any fails).", _obj("", {
            **VERIFY_BODY, "root_source": ROOT_SOURCE,
            "layers": _array("every layer", _obj("one layer's verification", {**LAYER, **VERIFY_BODY})),
        })),
    "cache_repair": Kind(
        1, ("kernelforge cache repair --format json",),
        "What repair did.", _obj("", {
            "root": ROOT, "root_source": ROOT_SOURCE,
            "kept": _int("intact indexed entries"),
            "reindexed": _strs("intact entries the index had lost"),
            "quarantined": _array("damaged entries moved aside", _obj("one", {
                "name": _str("entry name"), "reason": _str("the damage"), "to": _str("where it went")})),
            "dropped": _strs("index entries with no files"),
            "permissions_fixed": _strs("paths whose group/other write permission was removed"),
            "index_problem": _nullable(_str("what was wrong with the index itself; null: nothing")),
            "unfixable": _strs("what repair could not fix (exit 1)"),
            "views_rewritten": _bool("the dispatch views were rewritten"),
        })),
    "cache_clean": Kind(
        1, ("kernelforge cache clean [--all | --stale] --format json",),
        "What clean removed.", _obj("", {
            "root": ROOT, "root_source": ROOT_SOURCE,
            "removed": _strs("keys of removed entries"),
            "removed_bytes": _int("their bytes"),
            "orphans_removed": _strs("debris directories removed"),
            "dry_run": _bool("--dry-run: nothing was removed; the lists are what would be"),
        })),
    "cache_gc": Kind(
        1, ("kernelforge cache gc --max-size SIZE | --older-than AGE --format json",),
        "What gc evicted (or would evict, with --dry-run).", _obj("", {
            **GC_BODY, "root_source": ROOT_SOURCE,
            "limit_source": _str("where max_size came from: --max-size, $KERNELFORGE_CACHE_MAX_SIZE, the "
                                 "cache's config.json, or none"),
        })),
    "cache_limit": Kind(
        1, ("kernelforge cache limit [SIZE|none] --format json",),
        "The cache's size limit in effect (after setting it).", _obj("", {
            "root": ROOT, "root_source": ROOT_SOURCE,
            "max_size": _nullable(_int("the limit in bytes; null: none")),
            "limit_source": _str("where it came from: $KERNELFORGE_CACHE_MAX_SIZE, the cache's config.json, "
                                 "or none"),
        })),
    "cache_merge": Kind(
        1, ("kernelforge cache merge SRC... --format json",),
        "What merge published, skipped and refused (exit 1 on any refusal).", _obj("", {
            "dest": ROOT, "root_source": ROOT_SOURCE,
            "sources": _strs("the source cache roots"),
            "ok": _bool("nothing was refused"),
            "merged": _int("entries published"),
            "identical": _int("entries already present with the same bytes"),
            "conflicts": _int("refusals that are conflicts (same key, other bytes)"),
            "refused": _array("entries refused", _obj("one", {
                "source": _str("source cache root"), "key": _str("cache key"), "name": _str("variant name"),
                "reason": _str("why"), "dest_sha256": _str("conflicts: the destination's sha256 (else empty)"),
                "source_sha256": _str("conflicts: the source's sha256 (else empty)")})),
            "quarantined": _strs("where conflicting incoming copies went"),
            "notes": _strs("notes (signatures, rebuild samples)"),
            "dry_run": _bool("--dry-run: nothing was written; merged counts what would be published"),
        })),
    "cache_push": _transfer("push", "What a push uploaded to a remote store."),
    "cache_pull": _transfer("pull", "What a pull downloaded from a remote store (exit 1 on any refusal)."),
    "cache_export": _transfer("export", "What an export wrote into a bundle."),
    "cache_import": _transfer("import", "What an import published from a bundle (exit 1 on any refusal)."),
}


def schema(kind: str) -> dict[str, Any]:
    """The complete JSON Schema of `kind`'s document (header included)."""
    k = KINDS[kind]
    body = k.body
    return {
        "$schema": DRAFT,
        "$id": PREFIX + kind,
        "title": f"{PREFIX}{kind} (version {k.version})",
        "description": k.description,
        "type": "object",
        "properties": {
            "schema": {"const": PREFIX + kind, "description": "which document this is"},
            "schema_version": {"const": k.version, "description": "the version of this schema"},
            **body["properties"],
        },
        "required": ["schema", "schema_version", *body["required"]],
        "additionalProperties": False,
    }


def document(kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` with the header of `kind` first."""
    clash = [k for k in HEADER_KEYS if k in obj]
    if clash:
        raise ValueError(f"{kind}: the report may not hold the header key(s) {clash}")
    return {"schema": PREFIX + kind, "schema_version": KINDS[kind].version, **obj}


def snake(value: str) -> str:
    """An enumerated value as JSON spells it: "up to date" -> "up_to_date", "DIFFERS" -> "differs"."""
    return value.strip().lower().replace(" ", "_").replace("-", "_")


def stats_body(report: Any) -> dict[str, Any]:
    """A StatsReport's dict with the cache layout's version as `cache_schema` (`schema` is the header's)."""
    d = report.to_dict()
    return {("cache_schema" if k == "schema" else k): v for k, v in d.items()}


def emit(kind: str, obj: Mapping[str, Any]) -> None:
    """Print `obj` as the JSON document of `kind` on stdout."""
    print(json.dumps(document(kind, obj), indent=1))


# ---- the reference page ----

def _type_text(s: Mapping[str, Any]) -> str:
    if "const" in s:
        return f"`{json.dumps(s['const'])}`"
    if "enum" in s:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in s["enum"])
    t = s.get("type", "any")
    types = t if isinstance(t, list) else [t]
    out = []
    for name in types:
        if name == "array" and isinstance(s.get("items"), Mapping) and s["items"].get("type") not in (None, "object"):
            out.append(f"array of {s['items']['type']}")
        elif name == "object" and "properties" not in s:
            value = s.get("additionalProperties")
            vt = value.get("type", "object") if isinstance(value, Mapping) else "any"
            out.append(f"map of {vt}")
        else:
            out.append(name)
    return " \\| ".join(out)


def _rows(props: Mapping[str, Any], required: list[str], prefix: str = "") -> list[str]:
    rows = []
    for key, s in props.items():
        path = prefix + key
        note = "" if key in required else " (optional)"
        rows.append(f"| `{path}` | {_type_text(s)} | {s.get('description', '')}{note} |")
        if "properties" in s:
            rows += _rows(s["properties"], s.get("required", []), path + ".")
        items = s.get("items")
        if isinstance(items, Mapping) and "properties" in items:
            rows += _rows(items["properties"], items.get("required", []), path + "[].")
        value = s.get("additionalProperties")
        if isinstance(value, Mapping) and "properties" in value:
            rows += _rows(value["properties"], value.get("required", []), path + ".*.")
    return rows


def markdown() -> str:
    """The reference page (docs/json-schemas.md)."""
    lines = [
        "# JSON output of the command line",
        "",
        "<!-- Generated from kernelforge/cli/json_schemas.py by "
        "`python -m kernelforge.cli.json_schemas --markdown > docs/json-schemas.md`; do not edit. -->",
        "",
        "Every `--format json` output is one JSON object with a declared, versioned shape: a JSON Schema",
        "(draft 2020-12) per kind, defined once in `kernelforge/cli/json_schemas.py`, which the commands",
        "print through and this page is generated from. `python -m kernelforge.cli.json_schemas --json KIND`",
        "prints a kind's JSON Schema (`--json` alone: all of them); the tables below list every key",
        "(`a[].b`: key `b` of each item of array `a`; `a.*.b`: of each value of map `a`).",
        "",
        CONVENTIONS.strip(),
        "",
        "| kind (`schema`) | `schema_version` | command |",
        "|---|---|---|",
    ]
    for kind, k in KINDS.items():
        lines.append(f"| [`{PREFIX}{kind}`](#{PREFIX.rstrip('.')}{kind}) | {k.version} | "
                     + "<br>".join(f"`{c}`".replace("|", "\\|") for c in k.commands) + " |")
    for kind, k in KINDS.items():
        full = schema(kind)
        lines += ["", f"## {PREFIX}{kind}", "", f"Version {k.version}. {k.description}", "",
                  *(f"    {c}" for c in k.commands), "",
                  "| key | type | meaning |", "|---|---|---|",
                  *_rows(full["properties"], full["required"])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--markdown"]:
        sys.stdout.write(markdown())
        return 0
    if len(args) == 2 and args[0] == "--json" and args[1] in KINDS:
        print(json.dumps(schema(args[1]), indent=1))
        return 0
    if args == ["--json"]:
        print(json.dumps({kind: schema(kind) for kind in KINDS}, indent=1))
        return 0
    print("usage: python -m kernelforge.cli.json_schemas --markdown | --json [KIND]\n"
          f"kinds: {', '.join(KINDS)}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())

"""The one rule set (controller.model.validation) and the strict document reader."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from controller.errors import FabricError, JobError
from controller.model import validation
from controller.model.clos import PRESETS, ClosSpec, build
from controller.model.documents import parse_text, read_document


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (math.nan, "finite"),
        (math.inf, "finite"),
        (-math.inf, "finite"),
        (1e308, "is not within"),
        (5e-324, "is not within"),
        (0, "is not within"),
        (-1, "is not within"),
        (True, "must be a number, got True"),
        ("400", "must be a number, got '400'$"),
        ("4e2", "must be a number, got '4e2' (YAML reads an exponent without a '.' as text"),
        (None, "must be a number"),
        (10**400, "is not within"),  # too big for a float
    ],
)
def test_gbps_rejects(value: object, words: str) -> None:
    with pytest.raises(FabricError, match=r"^links\.x: .*" + words.replace("(", r"\(")):
        validation.gbps(value, "links.x", FabricError)


def test_gbps_accepts_ints_and_floats_in_range() -> None:
    assert validation.gbps(400, "f") == 400.0 and validation.gbps(0.5, "f") == 0.5


@pytest.mark.parametrize("value", [math.nan, 5e-324, 1e-9, -0.5, 1.5, math.inf, True])
def test_fraction_rejects_denormals_and_out_of_range(value: float) -> None:
    with pytest.raises(FabricError, match="^reports\\[0\\].fraction: "):
        validation.fraction(value, "reports[0].fraction", FabricError)


def test_fraction_accepts_down_up_and_degraded() -> None:
    assert [validation.fraction(v, "f") for v in (0, 0.0, 1e-6, 0.5, 1)] == [0, 0, 1e-6, 0.5, 1]


@pytest.mark.parametrize("value", [True, 2.0, "3", None, [1]])
def test_integer_is_strict(value: object) -> None:
    with pytest.raises(JobError, match="must be an integer") as info:
        validation.integer(value, "jobs[0].dp", 1, 10, JobError)
    assert info.value.field == "jobs[0].dp"


def test_lists_and_texts_are_strict() -> None:
    with pytest.raises(FabricError, match="hosts: must be a list, got 'abc'"):
        validation.listing("abc", "hosts", 10, FabricError)
    with pytest.raises(FabricError, match="hosts: has 11 items; at most 10"):
        validation.listing([0] * 11, "hosts", 10, FabricError)
    with pytest.raises(FabricError, match="name: must be a string, got 123"):
        validation.text(123, "name", FabricError)
    with pytest.raises(FabricError, match="control characters"):
        validation.text("a\x00b", "name", FabricError)
    with pytest.raises(FabricError, match="at most 128"):
        validation.text("x" * 129, "name", FabricError)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("pods", 10**9, r"pods: 1000000000 is not within \[1, 1024\]"),
        ("pods", 1e9, "pods: must be an integer, got 1000000000.0"),
        ("racks_per_pod", True, "racks_per_pod: must be an integer, got True"),
        ("nics_per_host", 65, r"nics_per_host: 65 is not within \[1, 64\]"),
        ("atsws_per_plane", -1, r"atsws_per_plane: -1 is not within \[0, 256\]"),
    ],
)
def test_dimensions_are_capped_field_by_field(field: str, value: object, words: str) -> None:
    with pytest.raises(FabricError, match=words):
        build(ClosSpec(**{field: value}))  # type: ignore[arg-type]


def test_totals_are_capped_before_anything_is_allocated() -> None:
    # every field within its own cap, the product far beyond: a field-named error, at once
    spec = ClosSpec(pods=1024, racks_per_pod=4096, hosts_per_rack=256, nics_per_host=64,
                    atsws_per_plane=1, taper=1.0)  # fmt: skip
    with pytest.raises(FabricError, match=r"GPUs exceed the cap of 262,144"):
        build(spec)


def test_caps_admit_a_100k_gpu_cluster_with_headroom() -> None:
    spec = ClosSpec(name="100k", pods=32, racks_per_pod=192, hosts_per_rack=2,
                    nics_per_host=8, ctsws_per_pod=16, atsws_per_plane=8, taper=7.0)  # fmt: skip
    spec.validate()
    gpus = 32 * 192 * 2 * 8
    assert gpus >= 98_000 and validation.MAX_GPUS >= 2 * gpus
    for preset in PRESETS.values():
        preset.validate()


def test_taper_bounds_and_derived_speed() -> None:
    with pytest.raises(FabricError, match="^taper: must be a finite number"):
        build(ClosSpec(pods=2, atsws_per_plane=1, taper=math.nan))
    with pytest.raises(FabricError, match="^taper: 1e-05 is not within"):
        build(ClosSpec(pods=2, atsws_per_plane=1, taper=1e-5))


@pytest.mark.parametrize(
    ("kind", "text", "words"),
    [
        ("json", '{"pods": 1, "pods": 2}', "f: duplicate key 'pods'"),
        ("yaml", "pods: 1\npods: 2\n", "f: line 2: duplicate key 'pods'"),
        ("yaml", "links:\n  a: 1\n  a: 2\n", "f: line 3: duplicate key 'a'"),
        ("yaml", "a: &x [1]\nb: *x\n", "f: not valid YAML: anchors and aliases are not allowed"),
        ("yaml", "a: [1,\n", "f: not valid YAML"),
        ("json", "[" * 100_000 + "]" * 100_000, "f: nested too deeply"),
        ("json", "1" * 5000, "f: not valid JSON"),
        ("yaml", "a: " + "1" * 5000, "f: not valid YAML"),
        ("yaml", "{[1]: 2}", "f: not valid YAML"),
    ],
)
def test_strict_documents(kind: str, text: str, words: str) -> None:
    with pytest.raises(FabricError) as info:
        parse_text(text, kind, "f", FabricError)
    assert str(info.value).startswith(words)


def test_merge_keys_are_refused() -> None:
    with pytest.raises(FabricError, match="f: not valid YAML: .*merge"):
        parse_text("<<: {a: 1}\nb: 2\n", "yaml", "f", FabricError)


def test_binary_junk_is_not_utf8_text_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "junk.yaml"
    path.write_bytes(b"pods: 1\n\xff\xfe\x00\x81garbage")
    with pytest.raises(FabricError, match=r"junk.yaml: not UTF-8 text \(byte 8 is 0xff\)"):
        read_document(path, FabricError)


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_byte_order_mark_is_read_past(tmp_path: Path, suffix: str) -> None:
    """Windows editors and PowerShell 5 start UTF-8 files with one; JSON refused the file
    ("Unexpected UTF-8 BOM"). A byte that is not UTF-8 after it is still named by its place."""
    path = tmp_path / f"doc{suffix}"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"preset": "tiny"}')
    assert read_document(path, FabricError) == {"preset": "tiny"}
    path.write_bytes(b"\xef\xbb\xbf" + b'{"preset": "\xff"}')
    with pytest.raises(FabricError, match=r"not UTF-8 text \(byte 15 is 0xff\)"):
        read_document(path, FabricError)


def test_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(JobError, match="nope.json: cannot read placement file"):
        read_document(tmp_path / "nope.json", JobError, "placement file")


def test_only_regular_files_are_read(tmp_path: Path) -> None:
    with pytest.raises(FabricError, match=f"^{tmp_path}: not a regular file"):
        read_document(tmp_path, FabricError)
    with pytest.raises(FabricError, match="^/dev/zero: not a regular file"):
        read_document("/dev/zero", FabricError)


def test_size_is_capped_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    with path.open("wb") as fh:  # sparse: nothing is written, the size is what counts
        fh.truncate(validation.MAX_DOCUMENT_BYTES + 1)
    with pytest.raises(FabricError, match="big.json: larger than 256 MiB"):
        read_document(path, FabricError)

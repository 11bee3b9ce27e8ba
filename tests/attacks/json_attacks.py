"""JSON members of a ``.pt2`` (weights/constants configs, ``models/model.json``): recursion
bombs, huge numbers and strings, duplicate keys, NaN/Infinity, wrong types at every level."""

from __future__ import annotations

import json
from pathlib import Path

import workbench as wb
from workbench.limits import LimitError

from ._common import Case, put, replace_member, sample

PT2 = "mlp.pt2"
WEIGHTS = "data/weights/model_weights_config.json"
CONSTANTS = "data/constants/model_constants_config.json"
MODEL = "models/model.json"
DEEP = 100_000


def _with(member: str, content, name: str = "x.pt2"):
    def build(tmp: Path) -> Path:
        return put(tmp, name, replace_member(sample(PT2), member, content))
    return build


def _config_edit(edit):
    """A weights-config builder: ``edit(doc)`` changes the parsed document in place (or
    returns a replacement), then the document is written back with json.dumps."""
    def content(old: bytes) -> bytes:
        doc = json.loads(old)
        new = edit(doc)
        return json.dumps(doc if new is None else new).encode()
    return _with(WEIGHTS, content)


def _first(doc: dict) -> dict:
    return next(iter(doc["config"].values()))


def _set(path: tuple, value):
    """Set ``value`` at ``path`` inside the first config entry."""
    def edit(doc):
        o = _first(doc)
        for k in path[:-1]:
            o = o[k]
        o[path[-1]] = value
    return edit


def _names(art: wb.Artifact) -> set[str]:
    return set(art.tensors["name"])


def _has_fc1(art: wb.Artifact) -> None:
    assert {"fc1.weight", "fc1.bias"} <= _names(art)


def _model_edit(edit):
    def content(old: bytes) -> bytes:
        doc = json.loads(old)
        new = edit(doc)
        return json.dumps(doc if new is None else new).encode()
    return _with(MODEL, content)


def _deep_output_specs(old: bytes) -> bytes:
    """model.json over 1 MB (the scanning path) whose output_specs nest 600,000 deep."""
    key = b'"output_specs": ['
    i = old.index(key) + len(key)
    n = 600_000
    return old[:i] + b"[" * n + b"]" * n + b", " + old[i:]


def _dup_fqn(old: bytes) -> bytes:
    """The config with its first entry written twice, the second pointing at weight_1."""
    doc = json.loads(old)
    (fqn, first), *_ = doc["config"].items()
    body = json.dumps(doc)[len('{"config": {'):-2]
    second = dict(first, path_name="weight_1")
    return ('{"config": {' + body + ", " + json.dumps(fqn) + ": " + json.dumps(second) + "}}").encode()


def _aoti_device(value: bytes):
    """mlp_aoti.pt2 with the AOTInductor metadata's device replaced by ``value`` (found by
    bench/fuzz_cov.py: a list or a huge int reached the models frame's string column)."""
    def build(tmp: Path) -> Path:
        return put(tmp, "x.pt2", replace_member(sample("mlp_aoti.pt2"), "_metadata.json", lambda b: b.replace(
            b'"AOTI_DEVICE_KEY": "cpu"', b'"AOTI_DEVICE_KEY": ' + value)))
    return build


def _device_dropped(art: wb.Artifact) -> None:
    assert art.frames["models"]["device"].isna().all()
    assert art.validate()["message"].str.contains("is not a string").any()


CASES = [
    # -- recursion bombs: the depth limit, named with the member ---------------------------------
    Case("json_depth_weights_config", _with(WEIGHTS, b"[" * DEEP + b"]" * DEEP), LimitError,
         "model_weights_config.json' at 0x"),
    Case("json_depth_constants_config", _with(CONSTANTS, b'{"config": ' + b"[" * DEEP + b"]" * DEEP
                                             + b"}"), LimitError, "JSON_MAX_DEPTH=256"),
    Case("json_depth_model_json", _with(MODEL, b"[" * DEEP + b"]" * DEEP), LimitError,
         "models/model.json' at 0x"),
    Case("json_depth_model_json_objects", _with(MODEL, b'{"a": ' * DEEP + b"1" + b"}" * DEEP),
         LimitError, "JSON_MAX_DEPTH"),
    Case("json_depth_scanned_output_specs", _with(MODEL, _deep_output_specs), LimitError,
         "JSON_MAX_DEPTH"),
    Case("json_depth_inside_a_string", _config_edit(lambda d: d.update(x="[" * DEEP)), None,
         check=_has_fc1),
    # -- huge numbers and strings ----------------------------------------------------------------
    Case("json_int_too_many_digits", _with(WEIGHTS, lambda b: b.replace(
        b'"storage_offset": {"as_int": 0}', b'"storage_offset": {"as_int": 1' + b"0" * 5000 + b"}", 1)),
        LimitError, "JSON_MAX_INT_DIGITS"),
    Case("json_int_huge_offset", _config_edit(_set(("tensor_meta", "storage_offset", "as_int"),
                                                   10 ** 4000)), wb.ArtifactError, "config["),
    Case("json_huge_size", _config_edit(_set(("tensor_meta", "sizes"), [{"as_int": 2 ** 62}] * 2)),
         wb.ArtifactError, "config["),
    Case("json_huge_float", _config_edit(_set(("tensor_meta", "sizes"), [{"as_int": 1e308}] * 2)),
         wb.CorruptError, "config["),
    Case("json_long_string_key", _config_edit(lambda d: d.update(y={"z": "s" * (4 << 20)})), None,
         check=_has_fc1),
    # -- duplicate keys: the last wins (as in json.loads, which torch.export.load uses) ----------
    Case("json_duplicate_fqn", _with(WEIGHTS, _dup_fqn), wb.OutOfBoundsError,
         "member 'mlp/data/weights/weight_1'"),
    Case("json_duplicate_config_key", _with(WEIGHTS, lambda b: b[:-1] + b', "config": {}}'), None,
         check=lambda art: None),
    # -- NaN / Infinity ------------------------------------------------------------------------------
    Case("json_nan_storage_offset", _with(WEIGHTS, lambda b: b.replace(
        b'"storage_offset": {"as_int": 0}', b'"storage_offset": {"as_int": NaN}', 1)),
        wb.CorruptError, "config["),
    Case("json_infinity_size", _with(WEIGHTS, lambda b: b.replace(
        b'"sizes": [{"as_int": 32}', b'"sizes": [{"as_int": -Infinity}', 1)),
        wb.CorruptError, "config["),
    Case("json_nan_in_model_json", _model_edit(lambda d: d.update(torch_version=float("nan"))),
         None, check=_has_fc1),
    Case("json_not_utf8", _with(WEIGHTS, lambda b: b.replace(b"fc1.weight", b"fc1.w\xffight", 1)),
         wb.CorruptError, "UTF-8"),
    # -- wrong types at every level of the weights config ------------------------------------------
    Case("json_type_document", _config_edit(lambda d: [d]), wb.CorruptError, "'config' object"),
    Case("json_type_config", _config_edit(lambda d: {"config": list(d["config"].items())}),
         wb.CorruptError, "'config' object"),
    Case("json_type_entry", _config_edit(lambda d: d["config"].update(
        {k: [v] for k, v in d["config"].items()})), wb.CorruptError, "config["),
    Case("json_type_path_name", _config_edit(_set(("path_name",), 5)), wb.CorruptError, "config["),
    Case("json_type_tensor_meta", _config_edit(_set(("tensor_meta",), "float")), wb.CorruptError,
         "config["),
    Case("json_type_sizes", _config_edit(_set(("tensor_meta", "sizes"), {"as_int": 3})),
         wb.CorruptError, "config["),
    Case("json_type_size_item", _config_edit(_set(("tensor_meta", "sizes"), ["3"])),
         wb.CorruptError, "config["),
    Case("json_type_dtype", _config_edit(_set(("tensor_meta", "dtype"), "float32")),
         wb.CorruptError, "config["),
    Case("json_type_strides", _config_edit(_set(("tensor_meta", "strides"), None)),
         wb.CorruptError, "config["),
    Case("json_type_use_pickle", _config_edit(_set(("use_pickle",), "no")), wb.CorruptError,
         "config["),
    # -- wrong types at every level of model.json ---------------------------------------------------
    Case("json_model_type_document", _model_edit(lambda d: [d]), wb.CorruptError, "model.json"),
    Case("json_model_type_graph_module", _model_edit(lambda d: d.update(graph_module=5)),
         wb.CorruptError, "model.json"),
    Case("json_model_type_signature", _model_edit(
        lambda d: d["graph_module"].update(signature=[])), wb.CorruptError, "model.json"),
    Case("json_aoti_device_deep_list", _aoti_device(b"[" * 64 + b"]" * 64), None,
         check=_device_dropped),
    Case("json_aoti_device_huge_int", _aoti_device(b"-9223372036854775809"), None,
         check=_device_dropped),
    Case("json_model_type_nodes", _model_edit(
        lambda d: d["graph_module"]["graph"].update(nodes="x")), None, check=_has_fc1),
    Case("json_model_type_specs", _model_edit(
        lambda d: d["graph_module"]["signature"].update(input_specs={"a": 1})), None,
         check=_has_fc1),
]

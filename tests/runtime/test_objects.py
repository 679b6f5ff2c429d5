"""Pure helpers: freezing, canonical form, the apply no-op guard, errors, predicates and the store."""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import maasctl.runtime as rt
from maasctl.runtime.apply import is_unchanged, leaf_paths, owned_paths
from maasctl.runtime.errors import Conflict, Gone, Invalid, NotFound, ServerError, error_from_response
from maasctl.runtime.informer import Event, EventType
from maasctl.runtime.objects import canonical, freeze, frozen_loads, thaw
from maasctl.runtime.predicates import deletion, generation_changed, resource_version_changed
from maasctl.runtime.store import Store

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=15,
)


@given(JSON)
def test_freeze_thaw_roundtrip(value: Any) -> None:
    assert thaw(freeze(value)) == value


@given(JSON)
def test_canonical_is_idempotent_and_has_no_nulls_or_empty_collections(value: Any) -> None:
    once = canonical(value)
    assert canonical(once) == once
    for v in _map_values(once):
        assert v is not None and v != {} and v != []


def _map_values(d: Any) -> list[Any]:
    out: list[Any] = []
    if isinstance(d, dict):
        for v in d.values():
            out.append(v)
            out.extend(_map_values(v))
    elif isinstance(d, list):
        for v in d:
            assert v is not None
            out.extend(_map_values(v))
    return out


def test_canonical_drops_server_dropped_fields() -> None:
    obj = {"metadata": {"name": "x", "creationTimestamp": None, "labels": {}}, "subjects": [], "data": {"a": ""}}
    assert canonical(obj) == {"metadata": {"name": "x"}, "data": {"a": ""}}


def test_frozen_objects_cannot_be_mutated() -> None:
    obj = freeze({"metadata": {"labels": {"a": "1"}}, "items": [1]})
    with pytest.raises(TypeError):
        obj["metadata"]["labels"]["b"] = "2"
    with pytest.raises(AttributeError):
        obj["items"].append(2)


def _shape(value: Any) -> Any:
    """The value with the type of every container: two frozen values are the same only with the same types."""
    if isinstance(value, MappingProxyType):
        return ("map", {k: _shape(v) for k, v in value.items()})
    if isinstance(value, tuple):
        return ("tuple", [_shape(v) for v in value])
    return (type(value).__name__, value)


@given(JSON)
def test_decoding_frozen_gives_what_decoding_then_freezing_gives(value: Any) -> None:
    """The informers decode straight into frozen objects (one pass instead of two): the result must be the very
    value, types included, that freezing the plain decode gives: lists in lists, empty maps, top-level arrays."""
    text = json.dumps(value)
    assert _shape(frozen_loads(text)) == _shape(freeze(json.loads(text)))
    assert _shape(frozen_loads(text.encode())) == _shape(freeze(json.loads(text)))


def test_a_frozen_decode_cannot_be_mutated_at_any_depth() -> None:
    obj = frozen_loads(b'{"spec": {"rules": [[{"a": 1}], []], "m": {}}, "items": [1, [2, [3]]]}')
    with pytest.raises(TypeError):
        obj["spec"]["rules"][0][0]["b"] = 2
    with pytest.raises(TypeError):
        obj["spec"]["m"]["x"] = 1
    assert obj["items"] == (1, (2, (3,)))
    assert frozen_loads('{"a": 1, "a": 2}') == {"a": 2}  # a repeated key: the last wins, as json.loads has it


def test_dict_and_list_subclasses_freeze_too() -> None:
    """The exact JSON types take a fast path; a subclass (an OrderedDict, a defaultdict, a list subclass a
    caller built) must not slip through as a mutable object."""
    from collections import OrderedDict, defaultdict

    class Items(list[Any]):
        pass

    obj = freeze(OrderedDict(a=defaultdict(list, b=Items([{"c": 1}])), d=(1, 2), e=3.5, f=None, g=True))
    with pytest.raises(TypeError):
        obj["a"]["x"] = 1
    assert isinstance(obj["a"]["b"], tuple) and isinstance(obj["a"]["b"][0], type(obj))
    with pytest.raises(TypeError):
        obj["a"]["b"][0]["c"] = 2
    assert obj["d"] == (1, 2) and obj["e"] == 3.5 and obj["f"] is None and obj["g"] is True


CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}, "data": {"a": "1"}}


def _live(data: dict[str, str], owned: dict[str, Any], manager: str = "me") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "c",
            "namespace": "n",
            "resourceVersion": "5",
            "managedFields": [
                {"manager": manager, "operation": "Apply", "apiVersion": "v1", "fieldsV1": owned},
            ],
        },
        "data": data,
    }


def test_unchanged_when_fields_and_values_match() -> None:
    live = _live({"a": "1", "other": "x"}, {"f:data": {"f:a": {}}})
    assert is_unchanged(CM, freeze(live), "me")


@pytest.mark.parametrize(
    ("live", "manager"),
    [
        (_live({"a": "2"}, {"f:data": {"f:a": {}}}), "me"),
        (_live({"a": "1", "b": "2"}, {"f:data": {"f:a": {}, "f:b": {}}}), "me"),  # we dropped b: must write
        (_live({"a": "1"}, {"f:data": {"f:a": {}}}), "someone-else"),
    ],
    ids=["value-differs", "field-removed-from-desired", "other-manager"],
)
def test_changed(live: dict[str, Any], manager: str) -> None:
    assert not is_unchanged(CM, _with_manager(live, manager), "me")


def _with_manager(live: dict[str, Any], manager: str) -> dict[str, Any]:
    live["metadata"]["managedFields"][0]["manager"] = manager
    return live


def test_owned_paths_treat_lists_as_leaves() -> None:
    fields = {"f:spec": {".": {}, "f:rules": {'k:{"name":"x"}': {"f:name": {}}}, "f:n": {}}}
    assert owned_paths(fields) == {("spec", "rules"), ("spec", "n")}
    assert leaf_paths({"spec": {"rules": [{"name": "x"}], "n": 1}}) == {("spec", "rules"), ("spec", "n")}


@pytest.mark.parametrize(
    ("status", "body", "cls"),
    [
        (404, {"reason": "NotFound", "message": "nope", "code": 404}, NotFound),
        (409, {"reason": "AlreadyExists", "code": 409}, Conflict),
        (410, {"reason": "Expired", "code": 410}, Gone),
        (503, b"<html>bad gateway</html>", ServerError),
    ],
    ids=["404", "409", "410", "html-503"],
)
def test_errors_are_typed(status: int, body: Any, cls: type[Exception]) -> None:
    raw = json.dumps(body).encode() if isinstance(body, dict) else body
    assert isinstance(error_from_response(status, raw), cls)


def test_invalid_carries_field_causes() -> None:
    body = {
        "code": 422,
        "reason": "Invalid",
        "message": "bad",
        "details": {"causes": [{"field": "spec.x", "reason": "FieldValueInvalid", "message": "must be > 0"}]},
    }
    err = error_from_response(422, json.dumps(body))
    assert isinstance(err, Invalid)
    assert [c.field for c in err.causes] == ["spec.x"]


def _obj(gen: int, rv: str, deleting: bool = False) -> Any:
    meta: dict[str, Any] = {"name": "x", "generation": gen, "resourceVersion": rv}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return freeze({"metadata": meta})


def test_predicates() -> None:
    upd = Event(EventType.UPDATED, _obj(1, "2"), _obj(1, "1"))
    spec = Event(EventType.UPDATED, _obj(2, "2"), _obj(1, "1"))
    resync = Event(EventType.UPDATED, _obj(1, "1"), _obj(1, "1"), low_priority=True)
    dele = Event(EventType.UPDATED, _obj(2, "3", True), _obj(1, "2"))
    assert not generation_changed(upd) and generation_changed(spec)
    assert generation_changed(Event(EventType.ADDED, _obj(1, "1")))
    assert not resource_version_changed(resync) and resource_version_changed(upd)
    assert deletion(dele) and not deletion(upd) and deletion(Event(EventType.DELETED, _obj(1, "1")))


def test_store_indexes_follow_updates_and_deletes() -> None:
    s = Store()
    a = freeze(
        {"metadata": {"name": "a", "namespace": "n", "labels": {"app": "x"}, "ownerReferences": [{"uid": "u1"}]}}
    )
    s.upsert("n/a", a)
    assert s.by_index("label", "app=x") == [a]
    assert s.by_index("owner", "u1") == [a]
    a2 = freeze({"metadata": {"name": "a", "namespace": "n", "labels": {"app": "y"}}})
    s.upsert("n/a", a2)
    assert s.by_index("label", "app=x") == []
    assert s.by_index("owner", "u1") == []
    s.add_indexer("name", lambda o: (o["metadata"]["name"],))
    assert s.by_index("name", "a") == [a2]
    s.delete("n/a")
    assert s.by_index("namespace", "n") == [] and len(s) == 0


def test_store_index_keys_is_a_live_view_of_one_index_value() -> None:
    s = Store()
    keys = s.index_keys("namespace", "n")
    assert len(keys) == 0 and "n/a" not in keys
    s.upsert("n/a", freeze({"metadata": {"name": "a", "namespace": "n"}}))
    s.upsert("n/b", freeze({"metadata": {"name": "b", "namespace": "n"}}))
    s.upsert("m/c", freeze({"metadata": {"name": "c", "namespace": "m"}}))
    keys = s.index_keys("namespace", "n")
    assert set(keys) == {"n/a", "n/b"}
    s.delete("n/b")
    assert set(keys) == {"n/a"}  # the same view follows the store
    with pytest.raises(KeyError):
        s.index_keys("no-such-index", "n")


def test_public_surface_is_pinned() -> None:
    assert sorted(rt.__all__) == rt.__all__
    for name in rt.__all__:
        assert hasattr(rt, name), name
    assert {"Manager", "ManagerOptions", "run_manager", "Result", "Request", "WorkQueue"} <= set(rt.__all__)


def test_result_constructors() -> None:
    assert rt.Result.done().after is None
    assert rt.Result.requeue_after(5).after == 5.0
    with pytest.raises(ValueError):
        rt.Result.requeue_after(0)
    with pytest.raises(AttributeError):
        rt.Result.done().after = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("address", "expected"),
    [(":8080", ("0.0.0.0", 8080)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("0", None), ("", None)],
    ids=["port-only", "host-port", "zero-disables", "empty-disables"],
)
def test_bind_address(address: str, expected: tuple[str, int] | None) -> None:
    from maasctl.runtime.probes import parse_bind_address

    assert parse_bind_address(address) == expected


def test_leader_election_timings_are_validated() -> None:
    rt.LeaderElectionOptions()  # controller-runtime defaults are valid
    with pytest.raises(ValueError):
        rt.LeaderElectionOptions(lease_duration=10, renew_deadline=10)
    with pytest.raises(ValueError):
        rt.LeaderElectionOptions(renew_deadline=2, retry_period=2)

"""Pure auth rules (SPEC §6 Auth): tokens file, role table, bearer parsing."""

from __future__ import annotations

import base64
import json

import pytest

from controlplane.server.auth import (
    Principal,
    Role,
    TokenFileError,
    allows,
    bearer_token,
    http_token,
    is_open,
    may_report_as,
    parse_tokens,
)

C = "/controlplane.v1.ContractService/"
L = "/controlplane.v1.LoadService/"
R = "/controlplane.v1.RouterService/"


@pytest.mark.parametrize(
    ("role", "method", "allowed"),
    [
        (Role.ADMIN, C + "UpdateContract", True),
        (Role.ADMIN, L + "RegisterWorker", True),
        (Role.ROUTER, C + "WatchContracts", True),
        (Role.ROUTER, C + "GetContract", True),
        (Role.ROUTER, C + "ListContracts", True),
        (Role.ROUTER, R + "ReportRouterStatus", True),
        (Role.ROUTER, L + "WatchLoads", True),
        (Role.ROUTER, C + "UpdateContract", False),
        (Role.ROUTER, C + "RollbackContract", False),
        (Role.ROUTER, L + "RegisterWorker", False),
        (Role.ROUTER, L + "ListWorkers", True),
        (Role.ROUTER, L + "GetLoads", True),
        (Role.ROUTER, R + "GetRejectionStats", False),
        (Role.ROUTER, R + "ListRouters", False),
        (Role.ROUTER, "/controlplane.v2.OtherService/GetThing", False),
        (Role.VIEWER, C + "ListContractHistory", True),
        (Role.VIEWER, R + "GetRejectionStats", True),
        (Role.VIEWER, R + "ReportRouterStatus", False),
        (Role.VIEWER, C + "DeleteContract", False),
        (Role.VIEWER, "/other.Service/GetThing", False),
    ],
)
def test_role_table(role, method, allowed):
    """Each role may call exactly the verbs of its row in the table."""
    assert allows(role, method) is allowed


@pytest.mark.parametrize(
    ("principal", "router_id", "allowed"),
    [
        (Principal("edge", Role.ROUTER), "edge", True),
        (Principal("edge", Role.ROUTER), "edge/3", True),
        (Principal("edge", Role.ROUTER), "edge-2", False),
        (Principal("edge", Role.ROUTER), "edg", False),
        (Principal("edge", Role.ROUTER), "other/edge", False),
        (Principal("ops", Role.ADMIN), "edge", True),
        (Principal("grafana", Role.VIEWER), "grafana", False),
    ],
)
def test_a_router_token_reports_only_in_its_namespace(principal, router_id, allowed):
    """A router token's router ids are its name or NAME/...; admin reports any; a viewer none."""
    assert may_report_as(principal, router_id) is allowed


@pytest.mark.parametrize(
    ("authorization", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Basic " + base64.b64encode(b"ops:abc").decode(), "abc"),
        ("Basic " + base64.b64encode(b":abc").decode(), "abc"),
        ("Basic " + base64.b64encode(b"ops:a:b").decode(), "a:b"),
        ("Basic " + base64.b64encode(b"abc").decode(), None),
        ("Basic " + base64.b64encode(b"ops:").decode(), None),
        ("Basic not-base64!", None),
        ("Digest abc", None),
        ("Bearer", None),
        (None, None),
    ],
)
def test_http_token_reads_bearer_or_the_basic_password(authorization, token):
    """The status page's token: Bearer T, or Basic with T as the password (RFC 7617); else none."""
    assert http_token(authorization) == token


def test_health_and_reflection_are_open():
    """Health and both reflection versions need no token; controlplane services do."""
    assert is_open("/grpc.health.v1.Health/Check")
    assert is_open("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo")
    assert is_open("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo")
    assert not is_open(C + "GetContract")


def test_tokens_file_maps_names_to_principals():
    """A presented token finds its name and role; an unknown or prefix token finds nothing."""
    table = parse_tokens(
        json.dumps({"ops": {"token": "abc123", "role": "admin"}, "r1": {"token": "xyz789", "role": "router"}})
    )
    assert table.lookup("abc123") == Principal("ops", Role.ADMIN)
    assert table.lookup("xyz789") == Principal("r1", Role.ROUTER)
    assert table.lookup("abc12") is None and table.lookup("abc1234") is None and table.lookup("") is None


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        "{}",
        '{"a": "tok"}',
        '{"a": {"token": "t", "role": "admin", "extra": 1}}',
        '{"a": {"token": "has space", "role": "admin"}}',
        '{"a": {"token": 5, "role": "admin"}}',
        '{"": {"token": "t", "role": "admin"}}',
    ],
)
def test_malformed_tokens_files_are_refused(text):
    """Every malformed shape is refused with a message, never silently accepted."""
    with pytest.raises(TokenFileError):
        parse_tokens(text)


def test_refusals_never_quote_a_secret():
    """A duplicate token is reported by the names that share it, not by the token."""
    with pytest.raises(TokenFileError) as info:
        parse_tokens(
            json.dumps(
                {"a": {"token": "s3cr3t", "role": "admin"}, "b": {"token": "s3cr3t", "role": "viewer"}}
            )
        )
    assert "s3cr3t" not in str(info.value) and "'a'" in str(info.value)


@pytest.mark.parametrize(
    ("header", "token"),
    [("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("Basic abc", None), ("Bearer", None), (None, None)],
)
def test_bearer_parsing(header, token):
    """Only the Bearer scheme (case-insensitive) carries a token."""
    assert bearer_token(header) == token


@pytest.mark.parametrize(
    "text",
    [
        '{"ops": ["abc123", "admin"], "r1": ["xyz789", "Router"]}',
        '[{"name": "ops", "token": "abc123", "role": "admin"}, {"name": "r1", "token": "xyz789", "role": "router"}]',
        "# name token role\nops abc123 admin\n\nr1\txyz789  router  # the edge\n",
        "name,token,role\nops,abc123,admin\nr1,xyz789,router\n",
        "ops:abc123:admin\nr1:xyz789:router\n",
    ],
)
def test_other_shapes_of_names_to_token_and_role(text):
    """The (token, role) pair, a list of objects and NAME TOKEN ROLE lines all read the same table."""
    table = parse_tokens(text)
    assert table.lookup("abc123") == Principal("ops", Role.ADMIN)
    assert table.lookup("xyz789") == Principal("r1", Role.ROUTER)
    assert len(table) == 2


@pytest.mark.parametrize(
    "text",
    [
        "ops abc123",
        "ops abc123 admin extra",
        '{"a": ["t"]}',
        '[{"name": "a", "token": "t"}]',
        "a t root",
        "a t admin\na u admin",
    ],
)
def test_malformed_other_shapes_are_refused(text):
    """A short or long line, a one-element pair, a missing key, a bad role or a repeated name is refused."""
    with pytest.raises(TokenFileError):
        parse_tokens(text)

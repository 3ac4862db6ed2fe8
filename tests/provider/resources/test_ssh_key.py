import json
import logging

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from provider.cty import UNKNOWN
from provider.framework import DiagnosticError, Diagnostics
from provider.framework.validate import validate_config
from provider.resources.rest import ETAG_KEY, IDEMPOTENCY_KEY
from provider.resources.ssh_key import SshKeyResource, normalize_public_key
from tests.contract.private_keys import FORMS, private_key, secret_lines
from tests.provider.resources.fakes import context, plan, problem

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBpXb0qE3m8q2hJm8mZ3n6i0Jtq2yR7mH3q1z2x3y4z5 me@laptop"
PRIOR = {
    "id": "ssh_01",
    "name": "laptop",
    "public_key": KEY + "\n",
    "fingerprint": "SHA256:abc",
    "key_type": "ssh-ed25519",
    "created_at": "2026-01-01T00:00:00Z",
}
BODY = {**PRIOR, "created_at": "2026-01-01T00:00:00+00:00", "updated_at": "2026-01-01T00:00:00+00:00"}


def test_ssh_key_whitespace_only_change_plans_the_prior_spelling_without_replace():
    planned, replace = plan(
        SshKeyResource(), context(), {"name": "laptop", "public_key": "  " + KEY.replace(" ", "  ")}, PRIOR
    )
    assert planned == PRIOR and replace == []


def test_ssh_key_other_key_requires_replace_and_unknown_computed():
    other = KEY.replace("AAAAIBp", "AAAAIBq")
    planned, replace = plan(SshKeyResource(), context(), {"name": "laptop", "public_key": other}, PRIOR)
    assert replace == ["public_key"] and planned["public_key"] == other


def test_ssh_key_rename_keeps_stable_computed_values():
    planned, replace = plan(SshKeyResource(), context(), {"name": "desk", "public_key": KEY + "\n"}, PRIOR)
    assert replace == [] and planned == {**PRIOR, "name": "desk"}


def test_ssh_key_create_plan_carries_idempotency_key_and_create_sends_it_on_every_retry():
    ctx = context()
    planned, _ = plan(SshKeyResource(), ctx, {"name": "laptop", "public_key": KEY}, None)
    assert planned["id"] is UNKNOWN and isinstance(ctx.private[IDEMPOTENCY_KEY], str)
    seen = []

    def handler(request):
        seen.append(request.headers.get("idempotency-key"))
        if len(seen) == 1:
            return httpx.Response(503, headers={"retry-after": "0"})
        return httpx.Response(201, json=BODY, headers={"etag": '"g1"'})

    apply_ctx = context(handler, private=dict(ctx.private))
    state = SshKeyResource().create(apply_ctx, {**planned, "public_key": KEY + "\n"})
    assert seen == [ctx.private[IDEMPOTENCY_KEY]] * 2
    assert state == PRIOR
    assert apply_ctx.private == {ETAG_KEY: '"g1"'}  # the key is dropped once the create is recorded


def test_ssh_key_duplicate_names_existing_key_at_public_key():
    ctx = context(
        lambda r: problem(
            409, "duplicate_ssh_key", "already registered", field="public_key", existing_id="ssh_09"
        )
    )
    with pytest.raises(DiagnosticError) as raised:
        SshKeyResource().create(ctx, {**PRIOR, "id": UNKNOWN})
    diag = raised.value.diagnostic
    assert diag.summary == "SSH Key Already Registered" and "ssh_09" in diag.detail
    assert diag.path[0].name == "public_key"


def test_ssh_key_read_404_removes_from_state_and_read_remembers_etag():
    gone = context(lambda r: problem(404, "not_found", "no ssh key"))
    assert SshKeyResource().read(gone, PRIOR) is None
    ctx = context(lambda r: httpx.Response(200, json={**BODY, "name": "renamed"}, headers={"etag": '"g7"'}))
    assert SshKeyResource().read(ctx, PRIOR) == {**PRIOR, "name": "renamed"}
    assert ctx.private[ETAG_KEY] == '"g7"'


def test_ssh_key_update_sends_if_match_and_only_the_name():
    seen = []

    def handler(request):
        seen.append((request.method, request.headers.get("if-match"), json.loads(request.content)))
        return httpx.Response(200, json={**BODY, "name": "desk"}, headers={"etag": '"g2"'})

    ctx = context(handler, private={ETAG_KEY: '"g1"'})
    state = SshKeyResource().update(ctx, {**PRIOR, "name": "desk"}, PRIOR)
    assert seen == [("PATCH", '"g1"', {"name": "desk"})]
    assert state["name"] == "desk" and ctx.private[ETAG_KEY] == '"g2"'


def test_ssh_key_update_conflict_says_what_to_do():
    ctx = context(
        lambda r: problem(412, "precondition_failed", "the resource changed"), private={ETAG_KEY: '"g1"'}
    )
    assert SshKeyResource().update(ctx, {**PRIOR, "name": "desk"}, PRIOR) is None
    (diag,) = ctx.diagnostics
    assert diag.summary == "Error Updating SSH Key" and "changed outside Terraform" in diag.detail


def test_ssh_key_delete_of_missing_key_succeeds():
    ctx = context(lambda r: problem(404, "not_found", "gone"))
    SshKeyResource().delete(ctx, PRIOR)
    assert not ctx.diagnostics


def test_ssh_key_config_validation_names_the_attribute():
    diags = Diagnostics()
    validate_config(
        SshKeyResource.schema, {**dict.fromkeys(PRIOR), "name": "", "public_key": "ssh-dss AAAA"}, diags
    )
    assert sorted({d.path[0].name for d in diags}) == ["name", "public_key"]
    assert any("ssh-ed25519" in d.detail for d in diags)


def test_normalize_public_key_ignores_only_whitespace():
    assert normalize_public_key(" a  b\tc \n") == "a b c"
    assert normalize_public_key("a b c") != normalize_public_key("a b d")


def test_ssh_key_unconfirmed_create_then_delete_replays_with_the_same_key():
    ctx = context(lambda r: httpx.Response(502), private={IDEMPOTENCY_KEY: "k9"})
    state = SshKeyResource().create(ctx, {**PRIOR, "id": UNKNOWN, "fingerprint": UNKNOWN})
    assert state["id"] == "unconfirmed-create:k9" and state["fingerprint"] is None
    assert "may have happened" in ctx.diagnostics[0].detail
    seen = []

    def handler(request):
        seen.append((request.method, request.url.path, request.headers.get("idempotency-key")))
        return httpx.Response(201, json=BODY) if request.method == "POST" else httpx.Response(204)

    SshKeyResource().delete(context(handler), state)
    assert seen == [("POST", "/v1/ssh-keys", "k9"), ("DELETE", "/v1/ssh-keys/ssh_01", None)]


def _public_key_errors(public_key: str) -> list:
    diags = Diagnostics()
    config = {**dict.fromkeys(PRIOR), "name": "k", "public_key": public_key}
    validate_config(SshKeyResource.schema, config, diags)
    return [d for d in diags if d.severity == "error"]


@pytest.mark.parametrize(("kind", "form"), FORMS)
def test_ssh_key_private_key_is_named_once_without_echoing_it(kind, form, caplog):
    caplog.set_level(logging.DEBUG)
    text = private_key(kind, form)
    (diag,) = _public_key_errors(text)
    assert diag.path[0].name == "public_key"
    assert diag.summary == "Private Key Instead Of Public Key" and ".pub" in diag.detail
    shown = f"{diag.summary} {diag.detail} {caplog.text}"
    assert "BEGIN" not in shown and not [line for line in secret_lines(text) if line[:16] in shown]


def test_ssh_key_rsa_below_2048_bits_is_refused_at_plan_time():
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()
    line = weak.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    (diag,) = _public_key_errors(line)
    assert diag.path[0].name == "public_key" and "2048 bits" in diag.detail
    strong = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    assert not _public_key_errors(
        strong.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    )

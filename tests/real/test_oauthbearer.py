"""SASL OAUTHBEARER with OIDC client credentials for real (issue 28, item 3).

A private stack (tests/fixtures/oidc.py): Keycloak (`lagpilot dev up --parts oidc`) issues tokens
for one confidential client; a broker with an OAUTHBEARER listener validates them with Kafka's
built-in `OAuthBearerValidatorCallbackHandler` against Keycloak's JWKS (signature, issuer,
audience, expiry). Kafka's own CLI and librdkafka are the clients that check the listener.
"""
from __future__ import annotations

import base64
import json
import urllib.error
import uuid
from pathlib import Path
from typing import Any

import pytest

from lagpilot_dev.kafka import OAUTH_ALLOWED_URLS_PROPERTY, TOPICS_CLASS, oauth_client_properties
from tests.fixtures.oidc import OidcKafka, oidc_kafka  # noqa: F401 - fixture

pytestmark = [pytest.mark.real, pytest.mark.slow]


def _claims(jwt: str) -> dict[str, Any]:
    payload = jwt.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def _topics_cli(ok: OidcKafka, props: Path, *args: str) -> Any:
    return ok.kafka.run_cli_tool(TOPICS_CLASS, ["--bootstrap-server", ok.oauth_bootstrap, "--command-config",
                                                str(props), *args],
                                 jvm_props={OAUTH_ALLOWED_URLS_PROPERTY: ok.token_endpoint_url}, timeout=240)


def _props(tmp_path: Path, name: str, ok: OidcKafka, secret: str) -> Path:
    p = tmp_path / name
    p.write_text(oauth_client_properties(ok.token_endpoint_url, ok.client_id, secret))
    p.chmod(0o600)
    return p


def test_keycloak_issues_tokens_for_the_client_and_refuses_a_wrong_secret(oidc_kafka: OidcKafka) -> None:  # noqa: F811
    ok = oidc_kafka
    token = ok.oidc.fetch_token()["access_token"]
    claims = _claims(token)
    print("token claims:", {k: claims.get(k) for k in ("iss", "aud", "azp", "exp", "iat", "sub")})
    assert claims["iss"] == ok.oidc.issuer()
    assert "kafka" in ([claims["aud"]] if isinstance(claims["aud"], str) else claims["aud"])
    assert claims["azp"] == ok.client_id and claims.get("sub")
    with pytest.raises(urllib.error.HTTPError) as info:
        ok.oidc.fetch_token(client_secret="wrong-" + uuid.uuid4().hex)
    assert info.value.code == 401


def test_kafka_cli_creates_and_lists_topics_with_oidc_and_fails_with_a_wrong_secret(
        oidc_kafka: OidcKafka, tmp_path: Path) -> None:  # noqa: F811
    ok = oidc_kafka
    topic = f"oauth-cli-{uuid.uuid4().hex[:8]}"
    good = _props(tmp_path, "good.properties", ok, ok.client_secret)
    res = _topics_cli(ok, good, "--create", "--topic", topic, "--partitions", "2", "--replication-factor", "1")
    print("kafka-topics --create:", res.returncode, res.stdout.strip(), res.stderr.strip()[-500:])
    assert res.returncode == 0, res.stderr
    res = _topics_cli(ok, good, "--list")
    assert res.returncode == 0 and topic in res.stdout.split(), (res.stdout, res.stderr)

    wrong = "wrong-" + uuid.uuid4().hex
    bad = _props(tmp_path, "bad.properties", ok, wrong)
    res = _topics_cli(ok, bad, "--list")
    print("kafka-topics --list with a wrong client secret:", res.returncode, res.stderr.strip()[-800:])
    assert res.returncode != 0
    assert topic not in res.stdout
    assert "401" in res.stderr or "authenticat" in res.stderr.lower(), res.stderr[-2000:]


def test_librdkafka_oidc_client_is_accepted_and_an_unsigned_token_is_refused(oidc_kafka: OidcKafka) -> None:  # noqa: F811
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    ok = oidc_kafka
    conf = {"bootstrap.servers": ok.oauth_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER"}
    oidc = {**conf, "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.token.endpoint.url": ok.token_endpoint_url,
            "sasl.oauthbearer.client.id": ok.client_id, "sasl.oauthbearer.client.secret": ok.client_secret}
    md = AdminClient(oidc).list_topics(timeout=60)
    # the listener advertises itself: clients bootstrapped here stay on OAUTHBEARER
    assert [f"{b.host}:{b.port}" for b in md.brokers.values()] == [ok.oauth_bootstrap]

    # librdkafka's default OAUTHBEARER token is an unsecured JWT (alg none): the broker must
    # check signatures against the JWKS and refuse it
    errors: list[str] = []
    forged = AdminClient({**conf, "sasl.oauthbearer.config": "principal=admin scope=kafka",
                          "enable.sasl.oauthbearer.unsecure.jwt": True, "log_level": 0,
                          "error_cb": lambda e: errors.append(e.name())})
    with pytest.raises(KafkaException):
        forged.list_topics(timeout=10)
    forged.poll(1)
    assert "_AUTHENTICATION" in errors, errors

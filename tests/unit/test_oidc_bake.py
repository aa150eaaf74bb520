"""lagpilot_dev.oidc: a state dir's Keycloak is a copy of the baked one, started with its build options."""

from __future__ import annotations

from pathlib import Path

from lagpilot_dev.oidc import KEYCLOAK_VERSION, OidcPart


def test_the_bake_and_a_state_dirs_start_use_the_same_build_time_options(tmp_path: Path) -> None:
    bake = OidcPart._argv(tmp_path / "a", 1001, 1002, marker="-Dm=a", import_realm=False)
    start = OidcPart._argv(tmp_path / "b", 2001, 2002, marker="-Dm=b", import_realm=True)

    build = ("start-dev", "--health-enabled", "--cache", "--db")  # what kc.sh persists at the augmentation

    def build_options(argv: list[str]) -> list[str]:
        return [a for a in argv[2:] if a.split("=")[0] in build]

    assert build_options(bake) == build_options(start)
    assert build_options(start) == ["start-dev", "--health-enabled=true", "--cache=local"]
    assert "--import-realm" in start and "--import-realm" not in bake
    assert "--http-port=2001" in start and "--hostname=http://127.0.0.1:2001" in start


def test_a_state_dir_copies_the_baked_distribution_and_keeps_its_copy(tmp_path: Path) -> None:
    part = OidcPart(tmp_path / "cache", tmp_path / "state")
    assert not part.installed()  # neither the zip nor the bake yet
    (part.baked / "lib" / "quarkus").mkdir(parents=True)
    (part.baked / "lib" / "quarkus" / "build-system.properties").write_text("kc.cache=local\n")
    (part.baked / ".complete").write_text(KEYCLOAK_VERSION + "\n")
    (part.cache / ".complete").write_text(KEYCLOAK_VERSION + "\n")
    assert part.installed()
    part.dir.mkdir(parents=True)
    part._unpack()
    assert (part.home / "lib" / "quarkus" / "build-system.properties").read_text() == "kc.cache=local\n"
    (part.home / "data").mkdir()  # the copy's own database: a second _unpack keeps it
    part._unpack()
    assert (part.home / "data").is_dir()
    assert not (part.baked / "data").exists()  # the cache is never written through a copy


def test_keycloak_serves_on_the_pod_bridge_when_the_node_made_it(tmp_path: Path) -> None:
    """Pods on the real node fetch their tokens at the token endpoint: Keycloak listens on the
    bridge gateway (pods reach the host there), and its issuer is pinned to that address, the one
    URL the host's clients, the broker's validator and the pods all use; loopback without the
    bridge. The same build-time options either way (no re-augmentation)."""
    start = OidcPart._argv(tmp_path, 2001, 2002, marker="-Dm=b", import_realm=True, host="10.244.0.1")
    assert "--http-host=10.244.0.1" in start and "--hostname=http://10.244.0.1:2001" in start
    assert not [a for a in start if "127.0.0.1" in a]
    loopback = OidcPart._argv(tmp_path, 2001, 2002, marker="-Dm=b", import_realm=True)
    assert [a for a in start if "10.244.0.1" not in a] == [a for a in loopback if "127.0.0.1" not in a]


def test_the_parts_addresses_follow_the_host_it_was_started_on(tmp_path: Path) -> None:
    """The host is chosen at start and kept in the state dir: a bridge made after Keycloak started
    on loopback does not move the addresses other processes read (the broker's JWKS, the tests)."""
    part = OidcPart(tmp_path / "cache", tmp_path / "state")
    assert part.http_host() == "127.0.0.1"
    port = part.http_port()
    assert (
        part.token_endpoint_url() == f"http://127.0.0.1:{port}/realms/lagpilot/protocol/openid-connect/token"
    )
    part.dir.mkdir(parents=True)
    (part.dir / "http-host").write_text("10.244.0.1\n")
    again = OidcPart(tmp_path / "cache", tmp_path / "state")
    assert again.issuer() == f"http://10.244.0.1:{port}/realms/lagpilot"
    assert again.jwks_url() == f"http://10.244.0.1:{port}/realms/lagpilot/protocol/openid-connect/certs"
    assert again.info()["oidc_token_endpoint_url"].startswith(f"http://10.244.0.1:{port}/")

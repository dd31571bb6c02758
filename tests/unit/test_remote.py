"""Reading spec.kubeConfig as helm-controller v1.6 does: the reference, the Secret key
order, the self-contained kubeconfig rules, impersonation, and what is not supported."""
from __future__ import annotations

import base64

import pytest
import yaml

from kubectl_flux_plunger.kube.remote import KubeConfigRef, RemoteError, Unsupported, kubeconfig_bytes, kubeconfig_ref, parse_kubeconfig

pytestmark = pytest.mark.unit
SRC = "kubeconfig Secret ns/kc"
CA_PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def kubeconfig(user: dict | None = None, cluster: dict | None = None, **top) -> bytes:
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "ctx",
           "clusters": [{"name": "tenant", "cluster": cluster if cluster is not None else {
               "server": "https://10.0.0.1:6443", "certificate-authority-data": b64(CA_PEM)}}],
           "users": [{"name": "u", "user": user if user is not None else {"token": "s3cret"}}],
           "contexts": [{"name": "ctx", "context": {"cluster": "tenant", "user": "u"}}]}
    cfg.update(top)
    return yaml.safe_dump(cfg).encode()


def hr(kube_config=None, sa=None) -> dict:
    spec: dict = {}
    if kube_config is not None:
        spec["kubeConfig"] = kube_config
    if sa:
        spec["serviceAccountName"] = sa
    return {"metadata": {"name": "demo", "namespace": "team"}, "spec": spec}


def test_a_release_without_kubeconfig_is_local():
    assert kubeconfig_ref(hr()) is None


def test_the_reference_names_the_secret_key_and_service_account():
    ref = kubeconfig_ref(hr({"secretRef": {"name": "kc", "key": "config"}}, sa="deployer"))
    assert ref == KubeConfigRef("team", "kc", "config", None, "deployer")
    assert ref.where == "kubeconfig Secret team/kc"


@pytest.mark.parametrize("data,key,expected", [
    ({"value": "A", "value.yaml": "B"}, None, b"A"),
    ({"value.yaml": "B"}, None, b"B"),
    ({"value": "A", "custom": "C"}, "custom", b"C"),
])
def test_key_order_is_helm_controllers(data, key, expected):
    secret = {"data": {k: b64(v) for k, v in data.items()}}
    ref = KubeConfigRef("team", "kc", key, None, None)
    assert kubeconfig_bytes(secret, ref) == expected


def test_a_named_key_that_is_missing_does_not_fall_back_to_value():
    secret = {"data": {"value": b64("A")}}
    with pytest.raises(RemoteError, match="does not contain a 'custom' key"):
        kubeconfig_bytes(secret, KubeConfigRef("team", "kc", "custom", None, None))


def test_no_default_key():
    with pytest.raises(RemoteError, match="'value' or 'value.yaml'"):
        kubeconfig_bytes({"data": {"other": b64("x")}}, KubeConfigRef("t", "kc", None, None, None))


def test_token_and_ca_are_kept_and_the_current_context_is_used():
    cfg = parse_kubeconfig(kubeconfig(), SRC, impersonate="system:serviceaccount:team:sa")
    assert cfg.server == "https://10.0.0.1:6443" and cfg.cluster == "tenant"
    assert cfg.token == "s3cret" and cfg.ca_data == CA_PEM.decode()
    assert cfg.impersonate == "system:serviceaccount:team:sa"
    assert "s3cret" not in repr(cfg) and "BEGIN" not in repr(cfg)


@pytest.mark.parametrize("where,entry,message", [
    ("cluster", {"server": "https://x", "certificate-authority": "/etc/ca.crt"},
     "certificate-authority file"),
    ("user", {"tokenFile": "/var/run/token"}, "tokenFile file"),
    ("user", {"client-certificate": "/c.crt", "client-key-data": b64("k")},
     "client-certificate file"),
    ("user", {"client-key": "/c.key", "client-certificate-data": b64("c")}, "client-key file"),
])
def test_file_references_are_refused_like_helm_controller(where, entry, message):
    data = kubeconfig(**{where: entry})
    with pytest.raises(RemoteError, match=message):
        parse_kubeconfig(data, SRC)


@pytest.mark.parametrize("user,message", [
    ({"exec": {"command": "aws", "apiVersion": "client.authentication.k8s.io/v1"}}, "exec plugin"),
    ({"auth-provider": {"name": "oidc"}}, "auth-provider"),
])
def test_plugins_are_unsupported(user, message):
    with pytest.raises(Unsupported, match=message):
        parse_kubeconfig(kubeconfig(user=user), SRC)


@pytest.mark.parametrize("data,message", [
    (b"\xff\xfe", "not YAML"),
    (b"- a\n- b\n", "not a mapping"),
    (b"apiVersion: v1\nkind: Config\n", "no current-context"),
    (kubeconfig(**{"current-context": "nope"}), "context 'nope' is not defined"),
    (kubeconfig(cluster={"certificate-authority-data": b64(CA_PEM)}), "has no server"),
    (kubeconfig(user={"client-certificate-data": b64("c")}), "must be given together"),
    (kubeconfig(cluster={"server": "https://x", "certificate-authority-data": "%%%"}),
     "not valid base64"),
    (kubeconfig(clusters=5), "cluster 'tenant' is not defined"),
    (kubeconfig(clusters=True), "cluster 'tenant' is not defined"),
    (kubeconfig(users=7), "user 'u' is not defined"),
    (kubeconfig(contexts=3), "context 'ctx' is not defined"),
])
def test_malformed_kubeconfigs_give_one_line_reasons_without_content(data, message):
    with pytest.raises(RemoteError, match=message) as info:
        parse_kubeconfig(data, SRC)
    text = str(info.value)
    assert text.startswith(SRC) and "\n" not in text and "s3cret" not in text


def test_proxy_is_unsupported():
    with pytest.raises(Unsupported, match="proxy"):
        parse_kubeconfig(kubeconfig(cluster={"server": "https://x", "proxy-url": "http://p"}), SRC)


def _client_pair(password: bytes | None) -> tuple[bytes, bytes]:
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "u")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    enc = (serialization.BestAvailableEncryption(password) if password
           else serialization.NoEncryption())
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM,
                              serialization.PrivateFormat.PKCS8, enc))


def test_an_encrypted_client_key_is_refused_without_a_passphrase_prompt():
    from kubectl_flux_plunger.kube.remote import RemoteConfig, ssl_context
    cert, key = _client_pair(None)
    ssl_context(RemoteConfig(server="https://x", cluster="tenant", cert_data=cert, key_data=key))
    cert, key = _client_pair(b"secret-passphrase")
    with pytest.raises(RemoteError, match="client key .* cluster 'tenant' is encrypted"):
        ssl_context(RemoteConfig(server="https://x", cluster="tenant", cert_data=cert,
                                 key_data=key))

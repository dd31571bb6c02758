"""Backup stores against a scripted fake API: the backup Secret (create, an earlier identical
attempt, refusals), pruning past the retention period (and what it must never do), reading
backups back from Secrets and files, and the one-line errors of each."""
from __future__ import annotations

import base64
import datetime as dt
import json
import logging

import pytest

from kubectl_flux_plunger.executor import backup
from kubectl_flux_plunger.core import storage
from kubectl_flux_plunger import kube as K

pytestmark = pytest.mark.unit
HR = {"metadata": {"namespace": "apps", "name": "my-app"}}
NOW = dt.datetime(2026, 12, 8, tzinfo=dt.timezone.utc)


def listed() -> dict:
    secret = storage.make_storage_secret("my-app", "apps", 3, "failed")
    secret["metadata"].update({"uid": "u-1", "resourceVersion": "42"})
    return secret


class FakeKube:
    """Answers each request from ``answers`` keyed by verb (a list per verb, in order);
    an exception in the list is raised."""

    def __init__(self, **answers):
        self.answers = {verb: list(a) for verb, a in answers.items()}
        self.calls: list[tuple[str, str, dict]] = []

    def request(self, verb, method, path, **kwargs):
        self.calls.append((verb, path, kwargs))
        a = self.answers[verb].pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    def verbs(self):
        return [c[0] for c in self.calls]


def err(status, message="m", **body):
    return K.kube_error(status, "R", message, body or None)


def backup_item(name, born, *, type_=backup.BACKUP_TYPE, uid="x"):
    return {"type": type_, "metadata": {"name": name, "uid": uid, "creationTimestamp": born}}


# -- SecretBackup.save ------------------------------------------------------------------

def test_secret_backup_creates_a_labelled_secret_then_prunes():
    kube = FakeKube(CREATE=[{}], LIST=[{"items": []}])
    store = backup.SecretBackup(kube, "flux-system")
    where = store.save(listed(), HR, "local")
    name = backup.SecretBackup.secret_name(listed(), "local")
    assert where == f"Secret flux-system/{name}" and name.startswith("flux-plunger-backup-")
    assert kube.verbs() == ["CREATE", "LIST"]
    body = kube.calls[0][2]["body"]
    assert body["type"] == backup.BACKUP_TYPE
    assert body["metadata"]["labels"] == {backup.BACKUP_LABEL: "true",
                                          backup.RELEASE_LABEL: "my-app",
                                          backup.REVISION_LABEL: "3"}
    doc = json.loads(base64.b64decode(body["data"][backup.DATA_KEY]))
    assert backup.provenance(doc) == ("apps", "my-app", "local")
    assert store.describe() == "a Secret in namespace flux-system"


def test_the_backup_name_differs_per_cluster_and_per_resource_version():
    a = backup.SecretBackup.secret_name(listed(), "local")
    other = listed()
    other["metadata"]["resourceVersion"] = "43"
    assert a != backup.SecretBackup.secret_name(listed(), "https://tenant:6443")
    assert a != backup.SecretBackup.secret_name(other, "local")


def test_an_earlier_identical_backup_counts_as_written():
    store = backup.SecretBackup(None, "flux-system")
    body = store.body(listed(), HR, "local")
    kube = FakeKube(CREATE=[err(409, "already exists")], GET=[body], LIST=[{"items": []}])
    store.kube = kube
    assert store.save(listed(), HR, "local").startswith("Secret flux-system/")
    assert kube.verbs() == ["CREATE", "GET", "LIST"]


@pytest.mark.parametrize("get", [
    {"data": {backup.DATA_KEY: "b3RoZXI="}},        # a different backup under the same name
    err(403, "forbidden"),                          # cannot even look
])
def test_a_conflicting_backup_that_is_not_ours_is_an_error(get):
    kube = FakeKube(CREATE=[err(409, "already exists")], GET=[get])
    store = backup.SecretBackup(kube, "flux-system")
    with pytest.raises(backup.BackupError) as e:
        store.save(listed(), HR, "local")
    assert str(e.value).startswith("cannot write backup Secret flux-system/flux-plunger-backup-")
    assert str(e.value).endswith(": already exists")
    assert "LIST" not in kube.verbs()       # nothing pruned after a failed backup


def test_a_refused_create_is_a_backup_error_without_a_second_look():
    kube = FakeKube(CREATE=[err(403, 'secrets is forbidden: User "x" cannot create')])
    with pytest.raises(backup.BackupError, match="cannot create$"):
        backup.SecretBackup(kube, "flux-system").save(listed(), HR, "local")
    assert kube.verbs() == ["CREATE"]


# -- pruning ----------------------------------------------------------------------------

def test_prune_deletes_only_old_backups_of_our_type_with_uid_preconditions():
    items = [
        backup_item("old", "2026-11-30T00:00:00Z", uid="u-old"),
        backup_item("young", "2026-12-07T00:00:00Z"),
        backup_item("foreign", "2026-11-01T00:00:00Z", type_="Opaque"),
        backup_item("undated", None),
        backup_item("gone", "2026-11-01T00:00:00Z"),
        backup_item("changed", "2026-11-01T00:00:00Z"),
    ]
    kube = FakeKube(LIST=[{"items": items}], DELETE=[{}, err(404), err(409)])
    pruned = backup.SecretBackup(kube, "ns").prune(NOW)
    assert pruned == ["old"]           # a 404 or 409 on delete: someone else got there first
    deletes = [c for c in kube.calls if c[0] == "DELETE"]
    assert [d[1].rsplit("/", 1)[1] for d in deletes] == ["old", "gone", "changed"]
    assert deletes[0][2]["body"]["preconditions"] == {"uid": "u-old"}
    assert kube.calls[0][2]["query"] == {"labelSelector": f"{backup.BACKUP_LABEL}=true"}


def test_prune_never_raises_it_logs(caplog):
    items = [backup_item("a", "2026-11-01T00:00:00Z"), backup_item("b", "2026-11-01T00:00:00Z")]
    kube = FakeKube(LIST=[{"items": items}, err(403, "list forbidden")],
                    DELETE=[err(403, "delete forbidden")])
    store = backup.SecretBackup(kube, "ns", retention=60)
    with caplog.at_level(logging.WARNING, logger="kubectl_flux_plunger.executor.backup"):
        assert store.prune(NOW) == []          # the 403 stops this prune
        assert store.prune(NOW) == []
    assert [r.getMessage() for r in caplog.records] == [
        "could not prune old backups in namespace ns: delete forbidden",
        "could not prune old backups in namespace ns: list forbidden",
    ]
    assert kube.verbs() == ["LIST", "DELETE", "LIST"]


# -- reading backups back ---------------------------------------------------------------

def _secret_holding(doc, type_=backup.BACKUP_TYPE):
    raw = doc if isinstance(doc, bytes) else backup.encode(doc)
    return {"type": type_, "data": {backup.DATA_KEY: base64.b64encode(raw).decode()}}


def test_load_secret_returns_the_document():
    doc = backup.document(listed(), HR, "local")
    kube = FakeKube(GET=[_secret_holding(doc)])
    assert backup.load_secret(kube, "ns", "b") == json.loads(backup.encode(doc))
    assert kube.calls[0][1] == "/api/v1/namespaces/ns/secrets/b"


@pytest.mark.parametrize(("answer", "message"), [
    (err(404, "not found", details={"name": "b", "kind": "secrets"}),
     "backup Secret ns/b not found"),
    (err(403, "forbidden"), "cannot read backup Secret ns/b: forbidden"),
    (err(404, "the server could not find the requested resource"),
     "cannot read backup Secret ns/b: the server could not find the requested resource"),
    ({"type": "Opaque", "data": {backup.DATA_KEY: "e30="}},
     "Secret ns/b is not a flux-plunger backup"),
    ({"type": backup.BACKUP_TYPE, "data": {}}, "Secret ns/b is not a flux-plunger backup"),
    ({"type": backup.BACKUP_TYPE}, "Secret ns/b is not a flux-plunger backup"),
    (_secret_holding(b"{not json"), "backup Secret ns/b holds no valid JSON"),
    ({"type": backup.BACKUP_TYPE, "data": {backup.DATA_KEY: "!!!"}},
     "backup Secret ns/b holds no valid JSON"),
    (_secret_holding({"kind": "ConfigMap"}),
     "Secret ns/b does not hold a Helm storage Secret"),
])
def test_load_secret_errors_are_one_line(answer, message):
    with pytest.raises(backup.BackupError) as e:
        backup.load_secret(FakeKube(GET=[answer]), "ns", "b")
    assert str(e.value) == message


@pytest.mark.parametrize(("doc", "message"), [
    ([1, 2], "does not hold a Helm storage Secret"),
    ({"kind": "Secret", "metadata": "x", "type": "helm.sh/release.v1"},
     "does not hold a Helm storage Secret"),
    ({"kind": "Secret", "metadata": {}, "type": "Opaque"}, "does not hold a Helm storage Secret"),
    ({"kind": "Secret", "metadata": {"name": "s"}, "type": "helm.sh/release.v1"},
     ": the Secret has no name or namespace"),
])
def test_load_file_refuses_what_is_not_a_helm_storage_secret(tmp_path, doc, message):
    path = tmp_path / "b.yaml"
    path.write_text(json.dumps(doc))
    with pytest.raises(backup.BackupError) as e:
        backup.load_file(path)
    assert str(e.value) == f"{path} {message}".replace(" :", ":")


def test_load_file_reads_yaml_and_refuses_garbage(tmp_path):
    import yaml

    doc = backup.document(listed(), HR, "local")
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert backup.load_file(path)["metadata"]["name"] == "sh.helm.release.v1.my-app.v3"
    path.write_text("key: [unclosed")
    with pytest.raises(backup.BackupError, match=r"b\.yaml is not a JSON or YAML document$"):
        backup.load_file(path)
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(backup.BackupError, match="is not a JSON or YAML document$"):
        backup.load_file(path)
    with pytest.raises(backup.BackupError, match="cannot read .*: Is a directory"):
        backup.load_file(tmp_path)


# -- the directory store ----------------------------------------------------------------

def test_directory_backup_that_cannot_create_its_directory_is_an_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = backup.DirectoryBackup(blocker / "sub")
    assert store.describe() == f"a file in {blocker / 'sub'}"
    with pytest.raises(backup.BackupError, match="^cannot write backup .*: Not a directory$"):
        store.save(listed(), HR, "local")


def test_directory_backup_names_sort_by_release_then_revision():
    store = backup.DirectoryBackup("/b")
    name = store.file_name(HR, listed())
    assert name.startswith("apps_my-app_v00000003_") and name.endswith("Z.json")
    odd = listed()
    odd["metadata"]["labels"]["version"] = "x"
    assert store.file_name({}, odd).startswith("__v00000000_")

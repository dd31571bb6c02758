"""The backup document (the Secret minus server-set fields, plus provenance) and the 0600,
never-overwritten backup files."""
from __future__ import annotations

import json
import stat

import pytest

from kubectl_flux_plunger.executor import backup
from kubectl_flux_plunger.core import storage

pytestmark = pytest.mark.unit
HR = {"metadata": {"namespace": "apps", "name": "my-app"}}


def listed(annotations=None) -> dict:
    secret = storage.make_storage_secret("my-app", "apps", 2, "uninstalling")
    secret["metadata"].update({"uid": "u-1", "resourceVersion": "42", "generation": 0,
                               "creationTimestamp": "2026-12-01T00:00:00Z",
                               "managedFields": [{"manager": "helm"}]})
    if annotations is not None:
        secret["metadata"]["annotations"] = annotations
    return secret


def test_strip_drops_only_server_set_fields():
    out = backup.strip(listed())
    assert set(out["metadata"]) == {"name", "namespace", "labels"}
    assert out["data"] == listed()["data"] and out["type"] == "helm.sh/release.v1"


@pytest.mark.parametrize("annotations", [None, {"keep": "me"}])
def test_the_document_round_trips_to_the_original(annotations):
    secret = listed(annotations)
    doc = backup.document(secret, HR, "https://tenant:6443")
    assert backup.provenance(doc) == ("apps", "my-app", "https://tenant:6443")
    assert backup.original(json.loads(backup.encode(doc))) == backup.strip(secret)
    assert secret["metadata"]["uid"] == "u-1"          # the input is not modified


def test_a_document_without_provenance_is_refused():
    with pytest.raises(backup.BackupError, match="not a flux-plunger backup"):
        backup.provenance(backup.strip(listed()))


def test_directory_backup_is_0600_and_never_overwrites(tmp_path, monkeypatch):
    secret = listed()  # one payload: make_storage_secret's gzip header carries the time
    store = backup.DirectoryBackup(tmp_path / "new")
    where = store.save(secret, HR, "local")
    [path] = (tmp_path / "new").iterdir()
    assert where == f"file {path}"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    monkeypatch.setattr(store, "file_name", lambda hr, secret: path.name)
    with pytest.raises(backup.BackupError, match="cannot write backup .*File exists"):
        store.save(listed(), HR, "local")
    assert backup.original(json.loads(path.read_bytes())) == backup.strip(secret)


def test_load_file_checks_it_is_a_helm_storage_backup(tmp_path):
    path = tmp_path / "x.json"
    path.write_bytes(backup.encode(backup.document(listed(), HR, "local")))
    assert backup.load_file(path)["metadata"]["name"] == "sh.helm.release.v1.my-app.v2"
    path.write_text(json.dumps(backup.strip(listed())))
    with pytest.raises(backup.BackupError, match="not a flux-plunger backup"):
        backup.load_file(path)
    with pytest.raises(backup.BackupError, match="cannot read"):
        backup.load_file(tmp_path / "missing.json")

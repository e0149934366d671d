"""``treespec keys add / list / revoke`` through the CLI dispatcher."""

from __future__ import annotations

from services.gateway.keys import digest, load_keys
from treespec.cli import main


class TestKeysCli:
    def test_add_list_revoke(self, tmp_path, capsys):
        """add prints a key once (only its digest is stored); list shows names; revoke removes."""
        path = str(tmp_path / "keys.json")
        assert main(["keys", "--keys-file", path, "add", "--name", "ci"]) == 0
        key = capsys.readouterr().out.strip()
        assert [r.sha256 for r in load_keys(path)] == [digest(key)]
        assert main(["keys", "--keys-file", path, "list"]) == 0
        listing = capsys.readouterr().out
        assert "ci" in listing and key not in listing
        assert main(["keys", "--keys-file", path, "revoke", "ci"]) == 0
        assert main(["keys", "--keys-file", path, "revoke", "ci"]) == 1
        assert load_keys(path) == []

    def test_duplicate_name_refused(self, tmp_path):
        """Adding a second key with the same name fails with exit status 1."""
        path = str(tmp_path / "keys.json")
        assert main(["keys", "--keys-file", path, "add", "--name", "x"]) == 0
        assert main(["keys", "--keys-file", path, "add", "--name", "x"]) == 1

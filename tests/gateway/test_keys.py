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

    def test_keys_file_after_the_action(self, tmp_path, capsys):
        """--keys-file works after the action too (``treespec keys add --keys-file F``), as users type it."""
        path = str(tmp_path / "keys.json")
        assert main(["keys", "add", "--keys-file", path, "--name", "late"]) == 0
        key = capsys.readouterr().out.strip()
        assert [r.name for r in load_keys(path)] == ["late"] and load_keys(path)[0].sha256 == digest(key)
        assert main(["keys", "list", "--keys-file", path]) == 0
        assert "late" in capsys.readouterr().out

    def test_keys_file_from_the_config(self, tmp_path, capsys):
        """Without --keys-file the file is the config's api_keys_file (here from --set, before or after the action)."""
        path = str(tmp_path / "keys.json")
        assert main(["keys", "--set", f"api_keys_file={path}", "add", "--name", "a"]) == 0
        assert main(["keys", "list", "--set", f"api_keys_file={path}"]) == 0
        assert "a\t" in capsys.readouterr().out

    def test_no_keys_file_or_bad_config_is_a_usage_error(self, tmp_path, capsys, monkeypatch):
        """No keys file anywhere, or a bad config key, exits 2 with a message naming the problem (no traceback)."""
        monkeypatch.delenv("TREESPEC_API_KEYS_FILE", raising=False)
        assert main(["keys", "list"]) == 2
        assert "no keys file" in capsys.readouterr().err
        assert main(["keys", "list", "--set", "no_such_key=1"]) == 2
        assert "no_such_key" in capsys.readouterr().err

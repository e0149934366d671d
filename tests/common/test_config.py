"""Configuration: precedence, coercion and errors that name the key."""

import pytest

from common.config import AUTO, Config, ConfigError, env_var, load_config


class TestLoadConfig:
    def test_defaults(self):
        """With no sources the defaults apply (tree_size auto)."""
        assert load_config(environ={}).tree_size == AUTO

    def test_env_override_beats_file(self, tmp_path):
        """TREESPEC_<KEY> overrides the TOML file; an explicit override beats both."""
        f = tmp_path / "c.toml"
        f.write_text("tree_size = 8\nport = 9000\n")
        env = {"TREESPEC_TREE_SIZE": "32", "TREESPEC_MAX_RUNNING": "3"}
        cfg = load_config(f, environ=env)
        assert (cfg.tree_size, cfg.port, cfg.max_running) == (32, 9000, 3)
        assert load_config(f, overrides={"tree_size": 4, "port": None}, environ=env).tree_size == 4
        assert env_var("tree_size") == "TREESPEC_TREE_SIZE"

    def test_unknown_key_named(self, tmp_path):
        """Unknown keys in a file or overrides raise ConfigError naming the key."""
        f = tmp_path / "c.toml"
        f.write_text("tree_sise = 8\n")
        with pytest.raises(ConfigError, match="tree_sise"):
            load_config(f, environ={})
        with pytest.raises(ConfigError, match="bogus_key"):
            load_config(overrides={"bogus_key": 1}, environ={})

    @pytest.mark.parametrize("value", ["many", "-1", "5000", "1.5"])
    def test_bad_tree_size(self, value):
        """A tree_size that is not 'auto' or an int in 0..1024 raises ConfigError naming it."""
        with pytest.raises(ConfigError, match="tree_size"):
            load_config(environ={"TREESPEC_TREE_SIZE": value})

    def test_bad_value_names_key(self):
        """A value of the wrong type or range names its key."""
        with pytest.raises(ConfigError, match="port"):
            load_config(environ={"TREESPEC_PORT": "eighty"})
        with pytest.raises(ConfigError, match="dtype"):
            Config(dtype="int8")

    @pytest.mark.parametrize("value,expected", [("auto", "auto"), ("on", "on"), ("true", "on"), ("0", "off"),
                                                (True, "on"), (False, "off")])
    def test_overlap_values(self, value, expected):
        """overlap accepts auto/on/off and booleans (TOML true/false, env 1/0)."""
        assert load_config(overrides={"overlap": value}, environ={}).overlap == expected

    def test_bad_overlap_names_key(self):
        """An overlap value other than auto/on/off raises ConfigError naming the key."""
        with pytest.raises(ConfigError, match="overlap"):
            load_config(environ={"TREESPEC_OVERLAP": "sometimes"})


class TestPrefixCacheKeys:
    def test_defaults_and_env(self):
        """The prefix cache is on by default with 16-token blocks; TREESPEC_PREFIX_CACHE=false turns it off."""
        cfg = load_config(environ={})
        assert cfg.prefix_cache is True and cfg.prefix_cache_block_size == 16
        assert load_config(environ={"TREESPEC_PREFIX_CACHE": "false"}).prefix_cache is False

    def test_bad_block_size_names_key(self):
        """A block size of 0 is refused, naming the key."""
        with pytest.raises(ConfigError, match="prefix_cache_block_size"):
            load_config(overrides={"prefix_cache_block_size": 0}, environ={})


class TestMainQuantization:
    @pytest.mark.parametrize("value", ["none", "int8", "int4"])
    def test_values(self, value):
        """main_quantization accepts none, int8 and int4 (env var or override); default none."""
        assert load_config(environ={}).main_quantization == "none"
        assert load_config(environ={"TREESPEC_MAIN_QUANTIZATION": value}).main_quantization == value

    def test_bad_value_names_key(self):
        """An unknown scheme raises ConfigError naming main_quantization."""
        with pytest.raises(ConfigError, match="main_quantization"):
            load_config(overrides={"main_quantization": "int3"}, environ={})

    def test_accelerator_refused(self):
        """A quantized main model on CUDA is refused, naming both keys (the kernels are CPU-only)."""
        with pytest.raises(ConfigError, match="main_quantization=int8 needs device=cpu.*cuda"):
            load_config(overrides={"main_quantization": "int8", "device": "cuda"}, environ={})

    def test_w4a8_accepted(self):
        """main_quantization=w4a8 loads (the host checks, AVX512-VNNI and g++, are the worker's, when it builds the kernel)."""
        assert load_config(overrides={"main_quantization": "w4a8"}, environ={}).main_quantization == "w4a8"

    def test_w4a8_refuses_float16(self):
        """w4a8 with dtype float16 is refused (its exact attention kernel takes bf16 or fp32)."""
        with pytest.raises(ConfigError, match="w4a8 needs dtype"):
            load_config(overrides={"main_quantization": "w4a8", "dtype": "float16"}, environ={})

    def test_tensor_parallel_refused(self):
        """A quantized main model with tensor_parallel_size > 1 is refused, naming both keys."""
        with pytest.raises(ConfigError, match="main_quantization=int4.*tensor_parallel_size=2"):
            load_config(overrides={"main_quantization": "int4", "tensor_parallel_size": 2}, environ={})


class TestPromptLookupKeys:
    def test_defaults_and_env(self):
        """Prompt lookup is on by default (n-grams 4 down to 2, 8 tokens); TREESPEC_PROMPT_LOOKUP=off turns it off."""
        cfg = load_config(environ={})
        assert cfg.prompt_lookup is True
        assert (cfg.prompt_lookup_max_ngram, cfg.prompt_lookup_min_ngram, cfg.prompt_lookup_num_tokens) == (4, 2, 8)
        assert load_config(environ={"TREESPEC_PROMPT_LOOKUP": "off"}).prompt_lookup is False

    @pytest.mark.parametrize("key,value", [("prompt_lookup_min_ngram", 5), ("prompt_lookup_min_ngram", 0),
                                           ("prompt_lookup_max_ngram", 0), ("prompt_lookup_num_tokens", 0),
                                           ("prompt_lookup_num_tokens", 100000)])
    def test_bad_values_name_the_key(self, key, value):
        """A min n-gram above the max (4) or below 1, or an out-of-range token count, is refused, naming the key."""
        with pytest.raises(ConfigError, match=key):
            load_config(overrides={key: value}, environ={})

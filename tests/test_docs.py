"""The READMEs and docs/ pages: size, links that resolve, and a command-line page that names every flag."""

import argparse
import glob
import importlib
import os
import re
import tomllib

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = [os.path.join(REPO, name) for name in ("README.md", "deploy/tf_serving/README.md")]
PAGES += sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _without_code(text):
    return re.sub(r"```.*?```", "", text, flags=re.DOTALL)


def _anchors(path):
    """GitHub's anchors of the headings of the markdown file `path`."""
    with open(path, encoding="utf-8") as f:
        headings = re.findall(r"^#+ (.+)$", _without_code(f.read()), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def _relative_links(path):
    with open(path, encoding="utf-8") as f:
        links = LINK.findall(_without_code(f.read()))
    return [link for link in links if not re.match(r"[a-z]+:", link)]


def test_the_readme_is_at_most_12000_bytes():
    assert os.path.getsize(os.path.join(REPO, "README.md")) <= 12_000


@pytest.mark.parametrize("page", PAGES, ids=lambda path: os.path.relpath(path, REPO))
def test_every_relative_link_points_to_a_file_and_heading_that_exist(page):
    broken = []
    for link in _relative_links(page):
        target, _, anchor = link.partition("#")
        target = os.path.normpath(os.path.join(os.path.dirname(page), target)) if target else page
        if not os.path.exists(target) or (anchor and target.endswith(".md") and anchor not in _anchors(target)):
            broken.append(link)
    assert not broken


def test_links_and_headings_are_read_outside_code_blocks(tmp_path):
    (tmp_path / "a.md").write_text(
        "# A\n\n## Some part\n\n[ok](#some-part) [gone](b.md) [no](#other) [web](https://x.org)\n"
        "```\n[in code](c.md)\n# not a heading\n```\n"
    )
    assert _relative_links(str(tmp_path / "a.md")) == ["#some-part", "b.md", "#other"]
    assert _anchors(str(tmp_path / "a.md")) == {"a", "some-part"}


def _command_parser():
    """The parser of the `gtr-keras` console script named in pyproject.toml."""
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        module_name = tomllib.load(f)["project"]["scripts"]["gtr-keras"].split(":")[0]
    return importlib.import_module(module_name).build_parser()


def test_the_command_line_page_names_every_command_and_flag():
    with open(os.path.join(REPO, "docs", "cli.md"), encoding="utf-8") as f:
        page = f.read()
    sub_commands = next(a for a in _command_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = []
    for name, parser in sub_commands.choices.items():
        assert f"gtr-keras {name}" in page
        if name == "saved-model-cli":
            continue  # its arguments are TensorFlow's saved_model_cli's
        section = page.split(f"\n### {name}\n", 1)[1].split("\n#", 1)[0]
        flags = [flag for action in parser._actions for flag in action.option_strings]
        missing += [
            f"{name} {flag}" for flag in flags if flag not in ("-h", "--help", "--debug") and f"`{flag}" not in section
        ]
    assert not missing


def _run_python_blocks(page):
    """Runs the Python code blocks of `page` in order, in one namespace (in the working directory)."""
    with open(os.path.join(REPO, page), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.DOTALL)
    namespace = {}
    for block in blocks:
        exec(compile(block, page, "exec"), namespace)
    return namespace


def test_the_readme_python_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = _run_python_blocks("README.md")
    assert [[hit["id"] for hit in row] for row in namespace["hits"]] in ([["d1", "d2"]], [["d2", "d1"]])
    assert len(namespace["fused"][0]) == 2
    assert sorted(namespace["index"].ids) == ["d2", "d4"]
    assert namespace["index"].search(["Okapi"], k=1, retriever="bm25")[0][0]["text"].startswith("Okapi BM25")
    assert namespace["d"].shape == (2, namespace["q"].shape[1]) and namespace["scores"].shape == (1, 2)
    assert type(namespace["embedder"]).__name__ == "GTRTextEmbedder"
    assert np.allclose(namespace["q"] @ namespace["d"].T, namespace["scores"], atol=1e-5)  # one model, two APIs


def test_the_architecture_page_holds_diagrams_and_runs_its_code():
    with open(os.path.join(REPO, "docs", "architecture.md"), encoding="utf-8") as f:
        fences = re.findall(r"^```(\w*)$", f.read(), flags=re.MULTILINE)
    openings = fences[0::2]
    assert openings and set(openings) <= {"text", "python"}, openings  # a diagram is text; code runs below
    _run_python_blocks("docs/architecture.md")


@pytest.mark.large
def test_the_python_api_page_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = _run_python_blocks("docs/python-api.md")
    assert sorted(namespace["index"].ids) == ["d1", "d2", "d5", "d6"]
    assert len(namespace["shards"]) == 5
    assert namespace["written"] == ["exports/gtr/encoder/1", "exports/gtr/searcher/1"]
    assert len(namespace["queries"]) == 225

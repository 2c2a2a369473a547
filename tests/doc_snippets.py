"""The Python code blocks of the docs, for the tests that run them."""

import os

from conftest import REPO


def python_blocks(page, title):
    """The Python code blocks of section `## title` of the markdown file `page` (relative to the repository)."""
    with open(os.path.join(REPO, page), encoding="utf-8") as f:
        text = f.read()
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return [block.split("```", 1)[0] for block in section.split("```python\n")[1:]]

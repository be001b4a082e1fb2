"""Reading ``application.yml`` without YAML 1.1's surprises.

PyYAML follows YAML 1.1, where ``1:30`` is the base-60 integer 90; a mistyped duration would
then be reported as "bare number 90". This loader resolves integers and floats the YAML 1.2
way, so such a value stays the text the user wrote and gets a useful error.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"


class ApplicationYamlLoader(yaml.SafeLoader):
    """``SafeLoader`` without sexagesimal numbers."""


ApplicationYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ApplicationYamlLoader.add_implicit_resolver(
    _INT_TAG,
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    list("-+0123456789"),
)
ApplicationYamlLoader.add_implicit_resolver(
    _FLOAT_TAG,
    re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?|\.[0-9_]+(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)


def read_yaml_document(path: str | Path) -> Any:
    """The parsed document at ``path`` (``None`` for an empty file)."""
    with open(path, encoding="utf-8") as stream:
        return yaml.load(stream, Loader=ApplicationYamlLoader)


def parse_yaml_text(text: str) -> Any:
    return yaml.load(text, Loader=ApplicationYamlLoader)

"""An agent card checked against the A2A 1.0 schema and the spec's rules (``card --validate``).

:func:`card_problems` takes the card's JSON value as served and names every problem it
finds, each as ``path: what is wrong``:

- the value is ProtoJSON of ``AgentCard`` (types, enum names, base64); fields the schema
  does not have are named too (a misspelt field is silently ignored by clients);
- every REQUIRED field (``google.api.field_behavior``) and every oneof, from the
  schema's descriptors (:func:`~.codec.violations`);
- ``supportedInterfaces``: a binding of the spec (``JSONRPC``, ``HTTP+JSON``, ``GRPC``)
  or a custom binding's URI; a ``Major.Minor`` protocol version; a URL the binding can
  use (``host:port`` for gRPC); at least one 1.x interface;
- every field named ``...Url``/``url``: an absolute URL, https unless the host is a
  loopback address (development);
- security: each requirement (the card's and each skill's) names schemes the card
  defines; API key locations; OAuth2 flows' URLs;
- media types (``type/subtype``) in the input and output modes; skill ids unique;
  capability extensions with a URI.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from typing import Any

from google.protobuf import descriptor, json_format, message

from lf.a2a.v1 import a2a_pb2 as pb

from . import codec

#: The protocol bindings the spec defines (a custom binding is named by a URI).
CORE_BINDINGS = ("JSONRPC", "HTTP+JSON", "GRPC")
_VERSION = re.compile(r"^\d+\.\d+$")
_MEDIA_TYPE = re.compile(r"^[\w.+-]+/[\w.+*-]+(\s*;.*)?$")
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):\d{1,5}$")
_API_KEY_LOCATIONS = ("query", "header", "cookie")


def card_problems(value: Any) -> list[str]:
    """Every problem of the card ``value`` (its JSON as served); empty when it is valid."""
    if not isinstance(value, dict):
        return ["the card is not a JSON object"]
    problems = [f"{path}: not a field of the A2A 1.0 schema" for path in _unknown(value)]
    try:
        card = json_format.ParseDict(value, pb.AgentCard(), ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        return [*problems, f"not an A2A 1.0 AgentCard: {str(exc).splitlines()[0]}"]
    problems += [f"{v.field}: {v.description}" for v in codec.violations(card)]
    problems += _interface_problems(card)
    problems += _url_problems(card, "")
    problems += _security_problems(card)
    problems += _mode_problems(card)
    ids = [skill.id for skill in card.skills]
    problems += [
        f"skills[{i}].id: {skill_id!r} is used by another skill"
        for i, skill_id in enumerate(ids)
        if skill_id and ids.index(skill_id) != i
    ]
    problems += [
        f"capabilities.extensions[{i}].uri: is required"
        for i, extension in enumerate(card.capabilities.extensions)
        if not extension.uri
    ]
    return problems


def _unknown(value: Any, desc: descriptor.Descriptor = pb.AgentCard.DESCRIPTOR) -> list[str]:
    """The paths of JSON keys ``desc`` has no field for."""
    found: list[str] = []

    def walk(item: Any, current: descriptor.Descriptor, path: str) -> None:
        if not isinstance(item, dict) or current.full_name.startswith("google.protobuf."):
            return
        fields = {f.json_name: f for f in current.fields} | {f.name: f for f in current.fields}
        for key, child in item.items():
            field = fields.get(key)
            where = f"{path}.{key}" if path else key
            if field is None:
                found.append(where)
                continue
            sub = field.message_type
            if sub is None:
                continue
            if sub.GetOptions().map_entry:
                value_type = sub.fields_by_name["value"].message_type
                if value_type is not None and isinstance(child, dict):
                    for name, entry in child.items():
                        walk(entry, value_type, f"{where}[{name!r}]")
            elif field.is_repeated and isinstance(child, list):
                for index, entry in enumerate(child):
                    walk(entry, sub, f"{where}[{index}]")
            else:
                walk(child, sub, where)

    walk(value, desc, "")
    return found


def _interface_problems(card: pb.AgentCard) -> list[str]:
    problems: list[str] = []
    for i, interface in enumerate(card.supported_interfaces):
        where = f"supportedInterfaces[{i}]"
        binding = interface.protocol_binding
        custom = "://" in binding or binding.startswith("urn:")
        if binding and binding not in CORE_BINDINGS and not custom:
            known = ", ".join(CORE_BINDINGS)
            problems.append(
                f"{where}.protocolBinding: {binding!r} is none of {known} (nor a custom"
                " binding's URI)"
            )
        version = interface.protocol_version
        if version and not _VERSION.match(version):
            problems.append(f"{where}.protocolVersion: {version!r} is not Major.Minor (e.g. 1.0)")
        if not interface.url or custom:
            continue
        if binding == "GRPC":
            problem = _grpc_address_problem(interface.url)
        else:
            problem = _url_problem(interface.url)
        if problem:
            problems.append(f"{where}.url: {problem}")
    versions = [i.protocol_version for i in card.supported_interfaces]
    if versions and not any(v.split(".", 1)[0] == "1" for v in versions):
        problems.append("supportedInterfaces: no interface speaks protocol version 1.x")
    return problems


def _grpc_address_problem(url: str) -> str:
    if _HOST_PORT.match(url):
        return ""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme in ("grpc", "grpcs", "http", "https") and parts.hostname:
        try:
            if parts.port is not None:
                return ""
        except ValueError:
            pass
    return f"{url[:80]!r} is not host:port (nor grpc[s]://host:port)"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url_problem(url: str) -> str:
    """Why ``url`` is not an absolute https URL ('' when it is one)."""
    parts = urllib.parse.urlsplit(url.strip())
    try:
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError:
        return f"{url[:80]!r} has a bad port"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{url[:80]!r} is not an absolute http(s) URL"
    if parts.scheme == "http" and not _loopback(parts.hostname):
        return f"{url[:80]!r} is not https (http only for a loopback address)"
    return ""


def _url_problems(msg: message.Message, path: str) -> list[str]:
    """Every set string field named ``url`` or ``...Url`` below ``msg`` (interfaces
    are checked with their binding)."""
    problems: list[str] = []
    for field, value in msg.ListFields():
        where = f"{path}.{field.json_name}" if path else field.json_name
        if field.message_type is None:
            named_url = field.name == "url" or field.name.endswith("_url")
            if named_url and isinstance(value, str) and value:
                problem = _url_problem(value)
                if problem:
                    problems.append(f"{where}: {problem}")
        elif field.name == "supported_interfaces":
            continue
        elif field.message_type.GetOptions().map_entry:
            if field.message_type.fields_by_name["value"].message_type is not None:
                for key, item in value.items():
                    problems += _url_problems(item, f"{where}[{key!r}]")
        elif field.is_repeated:
            for index, item in enumerate(value):
                problems += _url_problems(item, f"{where}[{index}]")
        else:
            problems += _url_problems(value, where)
    return problems


def _security_problems(card: pb.AgentCard) -> list[str]:
    problems: list[str] = []
    defined = set(card.security_schemes)
    requirements = [
        ("securityRequirements", index, requirement)
        for index, requirement in enumerate(card.security_requirements)
    ] + [
        (f"skills[{s}].securityRequirements", index, requirement)
        for s, skill in enumerate(card.skills)
        for index, requirement in enumerate(skill.security_requirements)
    ]
    for where, index, requirement in requirements:
        for name in requirement.schemes:
            if name not in defined:
                problems.append(
                    f"{where}[{index}]: names the security scheme {name!r}, which"
                    " securitySchemes does not define"
                )
    for name, scheme in sorted(card.security_schemes.items()):
        if scheme.WhichOneof("scheme") == "api_key_security_scheme":
            location = scheme.api_key_security_scheme.location
            if location and location not in _API_KEY_LOCATIONS:
                problems.append(
                    f"securitySchemes[{name!r}].apiKeySecurityScheme.location: {location!r}"
                    f" is none of {', '.join(_API_KEY_LOCATIONS)}"
                )
    return problems


def _mode_problems(card: pb.AgentCard) -> list[str]:
    lists = [("defaultInputModes", card.default_input_modes)]
    lists.append(("defaultOutputModes", card.default_output_modes))
    for index, skill in enumerate(card.skills):
        lists.append((f"skills[{index}].inputModes", skill.input_modes))
        lists.append((f"skills[{index}].outputModes", skill.output_modes))
    return [
        f"{where}[{i}]: {mode!r} is not a media type (type/subtype)"
        for where, modes in lists
        for i, mode in enumerate(modes)
        if not _MEDIA_TYPE.match(mode)
    ]


__all__ = ["CORE_BINDINGS", "card_problems"]

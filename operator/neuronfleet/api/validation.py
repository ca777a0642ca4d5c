"""Offline validation of InferenceDeployment manifests, as the API server would do it.

Three passes, in the API server's order:
1. the structural schema of the generated CRD (types, bounds, enums, patterns; unknown fields
   rejected as ``kubectl apply`` does with strict field validation), then the uniqueness of the
   items of ``x-kubernetes-list-type`` set and map lists (kube-apiserver's listtype validation);
2. defaulting, through the typed model;
3. the CEL rules (``x-kubernetes-validations``) of the same CRD, evaluated with cel-python on the
   defaulted object.
A whole number written as a float (``minReplicas: 2.0``, ``maxReplicas: 1e3``) is an integer, as
kube-apiserver takes it; manifests are read with :class:`ManifestLoader`, which resolves plain
scalars as kubectl does (go-yaml v2: ``1e3`` and ``0o17`` are numbers, ``y`` a boolean, ``1:30`` a
string, where PyYAML's YAML 1.1 rules read them otherwise).
Every problem carries the field path it concerns. Nothing here reads files or the network; the
catalog check (can any allowed instance type hold the model?) lives in ``planning``.
"""

from __future__ import annotations

import functools
import json
import math
import re
import struct
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, cast

import celpy
import jsonschema
import pydantic
import re2
import yaml
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError

from neuronfleet.api.crd import openapi_schema
from neuronfleet.api.v1alpha1 import API_VERSION, KIND, InferenceDeployment


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a manifest, at a field path such as ``spec.scaling.minReplicas``."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def not_utf8_message(error: UnicodeDecodeError) -> str:
    """What to say about a manifest that is not UTF-8 (Kubernetes manifests are; kubectl refuses others)."""
    return f"not UTF-8 text: byte 0x{error.object[error.start]:02x} at offset {error.start}"


def yaml_error_message(error: yaml.YAMLError) -> str:
    """One line for YAML that does not parse, with the line and column where the parser stopped
    (PyYAML's own message spans several lines and quotes the text)."""
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"malformed YAML{where}: {getattr(error, 'problem', None) or error}"


_INT, _FLOAT, _BOOL, _NULL, _STR = (f"tag:yaml.org,2002:{t}" for t in ("int", "float", "bool", "null", "str"))
_TIMESTAMP, _MERGE = "tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:merge"

#: go-yaml v2's resolveMap: the plain scalars it reads by table (YAML 1.1's booleans with ``y`` and
#: ``n``, which PyYAML leaves strings; null; infinities and NaN).
_GO_TABLE: dict[str, tuple[str, Any]] = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), (_BOOL, True)),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), (_BOOL, False)),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), (_NULL, None)),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), (_FLOAT, math.nan)),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), (_FLOAT, math.inf)),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), (_FLOAT, -math.inf)),
}
_GO_HINTS = frozenset("+-0123456789yYnNtTfFoO~.")
#: go-yaml v2's yamlStyleFloat, tried after the integer forms.
_GO_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_GO_DOT_FLOAT = re.compile(r"\.[0-9]+([eE][-+]?[0-9]+)?")  # what strconv.ParseFloat takes of ".5"-like text
_GO_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}"
    r"([Tt][0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2}(\.[0-9]+)?(Z|[-+][0-9]{2}:[0-9]{2})"
    r"| [0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2}(\.[0-9]+)?)?"
)
_DIGITS = {2: "01", 8: "01234567", 10: "0123456789", 16: "0123456789abcdefABCDEF"}


def _go_parse_int(text: str, *, signed: bool) -> int | None:
    """strconv.ParseInt(text, 0, 64) (signed) or ParseUint(text, 0, 64): an optional sign (signed
    only), then ``0x``, ``0o``, ``0b`` or a leading ``0`` (octal) or decimal digits; None when it fails."""
    negative = signed and text[:1] == "-"
    body = text[1:] if signed and text[:1] in "+-" else text
    if len(body) > 1 and body[0] == "0" and body[1] in "xXoObB":
        base, digits = {"x": 16, "o": 8, "b": 2}[body[1].lower()], body[2:]
    elif len(body) > 1 and body[0] == "0":
        base, digits = 8, body[1:]
    else:
        base, digits = 10, body
    if not digits or any(c not in _DIGITS[base] for c in digits):
        return None
    value = -int(digits, base) if negative else int(digits, base)
    if signed:
        return value if -(2**63) <= value < 2**63 else None
    return value if value < 2**64 else None


def _go_resolve(text: str) -> tuple[str, Any]:
    """go-yaml v2's resolve() of a plain scalar (resolve.go): the tag and value kubectl and
    kube-apiserver read (sigs.k8s.io/yaml uses it). A timestamp stays its text: decoded into an
    interface{}, as sigs.k8s.io/yaml decodes, go-yaml v2 keeps timestamps strings."""
    if text == "<<":
        return _MERGE, text  # go-yaml's decoder merges a plain << by its text (isMerge)
    if not text or text[0] in _GO_HINTS:
        if text in _GO_TABLE:
            return _GO_TABLE[text]
        if text[0] == ".":
            if _GO_DOT_FLOAT.fullmatch(text):
                return _FLOAT, float(text)
        elif text[0] in "+-0123456789":
            if _GO_TIMESTAMP.fullmatch(text):
                return _TIMESTAMP, text
            plain = text.replace("_", "")
            for signed in (True, False):
                number = _go_parse_int(plain, signed=signed)
                if number is not None:
                    return _INT, number
            if _GO_FLOAT.fullmatch(plain) and math.isfinite(float(plain)):  # ParseFloat fails out of range
                return _FLOAT, float(plain)
            for prefix, sign in (("0b", 1), ("-0b", -1)):
                digits = plain[len(prefix) :]
                if plain.startswith(prefix) and digits and set(digits) <= set("01"):
                    return _INT, sign * int(digits, 2)
    return _STR, text


def _go_key(key: Any) -> Any:
    """A mapping key as sigs.k8s.io/yaml writes it into JSON: booleans and numbers as their text."""
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float):
        if math.isnan(key):
            return ".nan"
        if math.isinf(key):
            return ".inf" if key > 0 else "-.inf"
        # strconv.FormatFloat(key, 'g', -1, 32): the shortest text of the float32 nearest.
        single = struct.unpack("f", struct.pack("f", key))[0]
        for digits in range(1, 10):
            text = f"{single:.{digits}g}"
            if struct.unpack("f", struct.pack("f", float(text)))[0] == single:
                return text
    return key


#: A UTF-16 surrogate: a Python string holds one only from an escape (``"\\ud83d"``), never from UTF-8 text.
_SURROGATE = re.compile("[\ud800-\udfff]")
#: A JSON text that may spell one: a ``\\u`` escape of D800-DFFF.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def go_json_text(text: str) -> str:
    """``text`` as Go's encoding/json reads the JSON string it came from: an escaped UTF-16
    surrogate pair (``"\\ud83d\\ude00"``, how Python's ``json.dumps`` writes an emoji) is its
    character, and a lone surrogate is U+FFFD. PyYAML keeps both as surrogates (Python's json, a
    lone one), which no UTF-8 encoder (RE2's, the API server's) takes."""
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def go_json(raw: bytes) -> Any:
    """A JSON body decoded as Go's encoding/json decodes it (strings by :func:`go_json_text`)."""
    value = json.loads(raw)
    return _go_json_strings(value) if _SURROGATE_ESCAPE.search(raw) else value


def _go_json_strings(value: Any) -> Any:
    if isinstance(value, str):
        return go_json_text(value)
    if isinstance(value, dict):
        return {go_json_text(k): _go_json_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_go_json_strings(v) for v in value]
    return value


class ManifestLoader(yaml.SafeLoader):
    """PyYAML's safe loader reading plain scalars as go-yaml v2 does (sigs.k8s.io/yaml, which kubectl
    and kube-apiserver read YAML with), not by PyYAML's YAML 1.1 rules: ``1:30`` is a string, not the
    sexagesimal 90; ``y`` / ``n`` are booleans; ``0o17`` is 15; ``1e3`` and ``-.5`` are numbers; a
    date is a string. Mapping keys that resolve to booleans or numbers become their text, as
    sigs.k8s.io/yaml writes them into JSON."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode and implicit[0]:
            return _go_resolve(value)[0]
        return super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]

    #: Refuse a mapping key written twice (:class:`ClientManifestLoader`).
    refuse_duplicate_keys = False
    #: The text is a JSON stream (:class:`ClientJsonManifestLoader`), which kubectl reads with Go's
    #: encoding/json, not go-yaml: surrogate escapes are read as :func:`go_json_text` reads them.
    json_stream = False

    def construct_scalar(self, node: Any) -> Any:
        value = super().construct_scalar(node)
        if isinstance(value, str) and _SURROGATE.search(value):
            if self.json_stream:
                return go_json_text(value)
            # go-yaml (as libyaml) refuses a \u escape of a UTF-16 surrogate, a pair's halves included.
            raise yaml.scanner.ScannerError(
                "while parsing a quoted scalar",
                node.start_mark,
                "found invalid Unicode character escape code",
                node.start_mark,
            )
        return value

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        # PyYAML's, with each key made text as it is read: a dict would take True and 1 for one key.
        if not isinstance(node, yaml.MappingNode):
            return super().construct_mapping(node, deep=deep)
        # A key written over one merged in with ``<<`` is YAML's override, not a duplicate.
        written = (
            {id(key_node) for key_node, _ in node.value if key_node.tag != _MERGE}
            if self.refuse_duplicate_keys
            else set()
        )
        self.flatten_mapping(node)
        mapping = {}
        first_line: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = _go_key(self.construct_object(key_node, deep=deep))
            if not isinstance(key, Hashable):
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, "found unhashable key", key_node.start_mark
                )
            if id(key_node) in written:
                if key in first_line:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"key {key!r} already set in this mapping at line {first_line[key]}",
                        key_node.start_mark,
                    )
                first_line[key] = key_node.start_mark.line + 1
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping


def _go_construct(tag: str) -> Any:
    """A constructor for ``tag``, implicit or written (``!!int 0o17``), with go-yaml's reading: an
    integer is taken for ``!!float``; anything else that does not resolve to ``tag`` is an error."""

    def construct(loader: yaml.SafeLoader, node: Any) -> Any:
        text = loader.construct_scalar(node)
        resolved, value = _go_resolve(text)
        if resolved == tag:
            return value
        if tag == _FLOAT and resolved == _INT:
            return float(value)
        if tag == _TIMESTAMP and _GO_TIMESTAMP.fullmatch(text):
            return text
        short = {t: "!!" + t.rsplit(":", 1)[1] for t in (_INT, _FLOAT, _BOOL, _NULL, _STR, _TIMESTAMP)}
        raise yaml.constructor.ConstructorError(
            None, None, f"cannot decode {short.get(resolved, resolved)} `{text}` as a {short[tag]}", node.start_mark
        )

    return construct


for _tag in (_INT, _FLOAT, _BOOL, _NULL, _TIMESTAMP):
    ManifestLoader.add_constructor(_tag, _go_construct(_tag))


class ClientManifestLoader(ManifestLoader):
    """:class:`ManifestLoader` refusing a mapping key written twice, as kubectl does before it sends
    anything ("key ... already set in map"): PyYAML keeps the last one silently, so a file's second
    ``scaling:`` replaced its first. (The API server's own reading of a YAML body is left to
    ``fieldValidation``: the sandbox's loads with :class:`ManifestLoader`.)"""

    refuse_duplicate_keys = True


class ClientJsonManifestLoader(ClientManifestLoader):
    """:class:`ClientManifestLoader` for a JSON stream, whose surrogate escapes kubectl reads with
    Go's encoding/json (an escaped emoji is the emoji) where go-yaml would refuse them."""

    json_stream = True


def is_json_stream(text: str) -> bool:
    """Whether kubectl reads ``text`` as a JSON stream: its first non-blank character is ``{``
    (apimachinery's YAMLOrJSONDecoder); any other text it reads as YAML."""
    return text.lstrip().startswith("{")


def load_manifests(text: str) -> list[Any]:
    """The non-empty YAML documents of ``text``, read as kubectl reads them (a duplicate key refused).

    A JSON stream (:func:`is_json_stream`) and YAML differ on surrogate escapes (:class:`ManifestLoader`)."""
    loader = ClientJsonManifestLoader if is_json_stream(text) else ClientManifestLoader
    return [doc for doc in yaml.load_all(text, Loader=loader) if doc is not None]


#: kube-openapi takes a float for an ``integer`` field when it is a whole number within JSON's safe
#: integers (go-openapi swag.IsFloat64AJSONInteger); Go then writes it back without a fraction.
_LARGEST_JSON_INTEGER = 2**53 - 1


def whole_floats_to_int(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` with each whole-number float at an ``integer`` field made an int (2.0 -> 2, 1e3 ->
    1000), as the API server accepts and stores it; other values are left for the schema to judge."""
    kind = schema.get("type")
    if kind == "integer" and isinstance(value, float):
        if value.is_integer() and abs(value) <= _LARGEST_JSON_INTEGER:
            return int(value)
        return value
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        return {
            k: whole_floats_to_int(v, props.get(k, extra if isinstance(extra, dict) else {})) for k, v in value.items()
        }
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [whole_floats_to_int(v, schema["items"]) for v in value]
    return value


def _strict(node: Any) -> Any:
    """A copy of the schema that rejects unknown fields (structural schemas merely prune them)."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _strict(value) for key, value in node.items()}
    if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


@functools.lru_cache(maxsize=256)
def _go_regex(pattern: str) -> Any:
    return re2.compile(pattern)


def go_pattern_matches(pattern: str, text: str) -> bool:
    """Whether ``text`` matches a schema ``pattern`` as kube-apiserver decides it: kube-openapi's
    validate.Pattern runs Go's regexp.MatchString, an unanchored RE2 search in which ``$`` is the end
    of the text. Python's ``re`` (jsonschema's) also lets ``$`` match before a final newline, so
    "2\\n" passed a quantity's pattern here while the API server refused it."""
    return _go_regex(pattern).search(text) is not None


def _go_pattern(
    validator: jsonschema.protocols.Validator, pattern: str, instance: Any, schema: dict[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    # jsonschema's own ``pattern`` keyword, with Go's regular expressions.
    if validator.is_type(instance, "string") and not go_pattern_matches(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


#: JSON Schema draft 4 (OpenAPI v3.0 spells exclusive bounds as booleans, as draft 4 does) with
#: ``pattern`` decided as kube-apiserver decides it; the sandbox's API server validates with it too.
KubeSchemaValidator: Any = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft4Validator, {"pattern": _go_pattern}
)


@functools.cache
def _schema_validator() -> jsonschema.protocols.Validator:
    schema = _strict(openapi_schema())
    # metadata is the API server's: keep it open.
    schema["properties"]["metadata"] = {"type": "object"}
    validator: jsonschema.protocols.Validator = KubeSchemaValidator(schema)
    return validator


@functools.cache
def _cel_environment() -> celpy.Environment:
    return celpy.Environment()


@functools.cache
def _cel_program(rule: str) -> Any:
    env = _cel_environment()
    return env.program(env.compile(rule))


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


#: A value each pattern field accepts, by field path (list indices dropped): the regular expression
#: alone does not show that memory is 8Gi rather than 8GB.
PATTERN_EXAMPLES = {
    "spec.model.name": "bert-base",
    "spec.compile.cpu": "16 or 500m",
    "spec.compile.cpuLimit": "16 or 500m",
    "spec.compile.memory": "8Gi",
    "spec.compile.ephemeralStorage": "50Gi",
    "spec.compile.serviceAccountName": "model-reader",
    "spec.runtime.cpu": "2 or 500m",
    "spec.runtime.cpuLimit": "2 or 500m",
    "spec.runtime.memory": "8Gi",
    "spec.runtime.ephemeralStorage": "20Gi",
    "spec.runtime.env.name": "LOG_LEVEL",
    "spec.runtime.serviceAccountName": "model-reader",
    "spec.placement.schedulerName": "my-scheduler",
    "spec.scaling.metrics.prometheusUrl": "http://prometheus.monitoring:9090",
}


def pattern_message(path: str, value: Any, regex: str) -> str:
    """What a value that does not match its field's pattern gets: the value as kube-apiserver quotes
    it, its "should match '<regex>'", and an example of an accepted value where there is one."""
    example = PATTERN_EXAMPLES.get(re.sub(r"\[\d+\]", "", path))
    return f"Invalid value: {go_value(value)}: should match '{regex}'" + (f" (e.g. {example})" if example else "")


#: The order kube-openapi checks a value's keywords in (type, then string, number, list and enum
#: checks), so that two refusals of one field read in the order kube-apiserver gives them.
_KEYWORD_ORDER = {
    keyword: rank
    for rank, keyword in enumerate(
        ("type", "maxLength", "minLength", "pattern", "maximum", "minimum", "minItems", "maxItems", "enum")
    )
}


def schema_error_order(error: jsonschema.ValidationError) -> tuple[list[tuple[int, int, str]], int]:
    """Sort key of a schema error: by field path (list indices as numbers), then as kube-openapi
    orders one field's checks."""
    path = [(0, part, "") if isinstance(part, int) else (1, 0, str(part)) for part in error.absolute_path]
    return path, _KEYWORD_ORDER.get(str(error.validator), len(_KEYWORD_ORDER))


def go_float(number: float) -> str:
    """``number`` as Go's ``%v`` prints a float64: the shortest digits that read back, in exponent
    form from 1e+06 up and below 1e-04 (``24``, ``0.999``, ``1e+06``)."""
    if number == 0:
        return "0"
    sign, digits, exponent = Decimal(repr(float(number))).normalize().as_tuple()
    assert isinstance(exponent, int)  # a finite float
    text = "".join(map(str, digits))
    magnitude = len(digits) - 1 + exponent
    if magnitude < -4 or magnitude >= 6:  # strconv's %g decides so at the shortest precision
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        body = f"{mantissa}e{'-' if magnitude < 0 else '+'}{abs(magnitude):02d}"
    elif exponent >= 0:
        body = text + "0" * exponent
    elif magnitude >= 0:
        body = text[: magnitude + 1] + "." + text[magnitude + 1 :]
    else:
        body = "0." + "0" * (-magnitude - 1) + text
    return ("-" if sign else "") + body


def _bare_boolean_hint(value: Any, supported: Any) -> str:
    """A hint when a boolean stands where a listed string that YAML reads as that boolean was meant
    (``mode: Off`` is ``false``): kube-apiserver's message alone names neither the cause nor the fix."""
    if not isinstance(value, bool) or not isinstance(supported, list):
        return ""
    # As the manifest's reader resolves a plain scalar (go-yaml v2's table: ``Off`` is false, ``oFF`` a string).
    meant = [item for item in supported if isinstance(item, str) and _GO_TABLE.get(item) == (_BOOL, value)]
    if not meant:
        return ""
    return f' (YAML reads a bare {meant[0]} as {str(value).lower()}: quote it, "{meant[0]}")'


def kube_schema_message(path: str, error: jsonschema.ValidationError) -> str | None:
    """What kube-apiserver says after ``<path>: `` of a value its CRD schema refuses by a bound or a
    list of values (apiextensions' ``kubeOpenAPIResultToFieldErrors`` over kube-openapi's messages):
    ``minimum`` / ``maximum``, ``enum``, ``minLength`` / ``maxLength``, ``minItems`` / ``maxItems``.
    None for any other keyword (the callers say those: ``pattern`` with an example, ``required``...).

    A bound prints as Go prints a float64 (kube-openapi holds bounds so); for an integer against a
    fractional bound kube-openapi compares and prints the bound truncated, which is not copied."""
    # jsonschema types these as possibly unset; an error of these keywords always carries both.
    keyword, bound, value = str(error.validator), cast(Any, error.validator_value), cast(Any, error.instance)
    schema = error.schema if isinstance(error.schema, dict) else {}
    if keyword in ("maximum", "minimum"):
        # OpenAPI v3.0 (and JSON Schema draft 4) make a bound exclusive with a boolean beside it.
        exclusive = bool(schema.get("exclusiveMaximum" if keyword == "maximum" else "exclusiveMinimum"))
        relation = ("less than" if keyword == "maximum" else "greater than") + ("" if exclusive else " or equal to")
        return f"Invalid value: {go_value(value)}: {path} in body should be {relation} {go_float(bound)}"
    if keyword == "enum":
        supported = ", ".join(go_quote(item if isinstance(item, str) else json.dumps(item)) for item in bound)
        return f"Unsupported value: {go_value(value)}: supported values: {supported}"
    if keyword == "maxLength":
        return f"Too long: may not be more than {bound} byte{'' if bound == 1 else 's'}"
    if keyword == "minLength":
        return f"Invalid value: {go_value(value)}: {path} in body should be at least {bound} chars long"
    if keyword == "maxItems":
        return f"Too many: {len(value)}: must have at most {bound} item{'' if bound == 1 else 's'}"
    if keyword == "minItems":
        return f"Invalid value: {len(value)}: {path} in body should have at least {bound} items"
    return None


def _schema_problems(obj: dict[str, Any], from_yaml: bool) -> list[Problem]:
    problems = []
    for error in sorted(_schema_validator().iter_errors(obj), key=schema_error_order):
        path = ""
        for part in error.absolute_path:
            path = _join(path, part)
        node_schema: dict[str, Any] = error.schema if isinstance(error.schema, dict) else {}
        if error.validator == "additionalProperties":
            instance = error.instance if isinstance(error.instance, dict) else {}
            unknown = sorted(set(instance) - set(node_schema.get("properties", {})))
            for name in unknown:
                problems.append(Problem(_join(path, name), f'unknown field "{name}"'))
            continue
        if error.validator == "required":
            missing = re.findall(r"'([^']+)' is a required property", error.message)
            field = missing[0] if missing else ""
            problems.append(Problem(_join(path, field) if field else path, "required field is missing"))
            continue
        if error.validator == "pattern":
            problems.append(Problem(path, pattern_message(path, error.instance, str(error.validator_value))))
            continue
        message = kube_schema_message(path, error) or error.message
        if error.validator == "enum" and from_yaml:
            # Read from YAML here (kube-apiserver sees only the JSON kubectl made of it); a JSON
            # ``false`` was written as one.
            message += _bare_boolean_hint(error.instance, error.validator_value)
        problems.append(Problem(path, message))
    return problems


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(text: str) -> str:
    """``text`` as Go's ``%q`` (strconv.Quote) prints it: printable characters as they are, whatever
    the script (``"8ГБ"``), others escaped (``\\x01``, ``\\u00a0``; JSON would write ``\\u0001``).
    ``text`` holds no UTF-16 surrogate: every reader here decodes their escapes as Go does
    (:func:`go_json_text`) or refuses them (:class:`ManifestLoader`)."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char.isprintable():
            out.append(char)
        elif char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def go_value(value: Any) -> str:
    """A value as apimachinery's field errors print it: numbers and booleans bare, strings quoted,
    anything else as Go's ``%#v`` of the decoded JSON (``map[string]interface {}{"name":"x"}``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, str):
        return go_quote(value)
    if value is None:
        return '"null"'
    if isinstance(value, dict):
        items = ",".join(f"{go_quote(str(k))}:{go_value(v)}" for k, v in sorted(value.items()))
        return f"map[string]interface {{}}{{{items}}}"
    if isinstance(value, list):
        return "[]interface {}{" + ", ".join(go_value(v) for v in value) + "}"
    return repr(value)


def _identity(item: Any) -> str:
    # Go compares scalars by dynamic type and value (int64 4 is not float64 4) and objects by their
    # JSON encoding; the type name keeps True apart from 1 as Go keeps bool apart from int64.
    return f"{type(item).__name__}:{json.dumps(item, sort_keys=True)}"


def duplicate_items(value: Any, schema: dict[str, Any], path: str) -> Iterator[tuple[str, str]]:
    """(field path, message) for each repeated item of a list-type set or key of a list-type map,
    as kube-apiserver's ``ValidateListSetsAndMaps`` reports them: once per repeated value, at the
    index of its second appearance, "Duplicate value: <value>" (a map reports its key fields)."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if isinstance(sub, dict):
                yield from duplicate_items(item, sub, _join(path, key))
        return
    if not isinstance(value, list):
        return
    list_type = schema.get("x-kubernetes-list-type")
    keys: list[Any] = []
    if list_type == "set":
        keys = list(value)
    elif list_type == "map":
        names = schema.get("x-kubernetes-list-map-keys") or []
        keys = [{n: item[n] for n in names if n in item} if isinstance(item, dict) else {} for item in value]
    seen: dict[str, int] = {}
    for index, key in enumerate(keys):
        identity = _identity(key)
        seen[identity] = seen.get(identity, 0) + 1
        if seen[identity] == 2:
            yield _join(path, index), f"Duplicate value: {go_value(key)}"
    items = schema.get("items")
    if isinstance(items, dict):
        for index, item in enumerate(value):
            yield from duplicate_items(item, items, _join(path, index))


def cel_value(value: Any, schema: dict[str, Any]) -> Any:
    """Shape a wire value as the API server hands it to CEL: `number` fields are doubles."""
    kind = schema.get("type")
    if kind == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind == "object" and isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        return {k: cel_value(v, props.get(k, extra if isinstance(extra, dict) else {})) for k, v in value.items()}
    if kind == "array" and isinstance(value, list):
        return [cel_value(v, schema.get("items", {})) for v in value]
    return value


def _rules_at(value: Any, schema: dict[str, Any], path: str) -> Iterator[Problem]:
    """Evaluate every CEL rule of `schema` and its children against `value`."""
    for rule in schema.get("x-kubernetes-validations", []):
        program = _cel_program(rule["rule"])
        try:
            ok = program.evaluate({"self": json_to_cel(cel_value(value, schema))})
        except CELEvalError as exc:
            yield Problem(path, f"rule {rule['rule']!r} could not be evaluated: {exc}")
            continue
        if not bool(ok):
            where = (path + rule["fieldPath"]).lstrip(".") if rule.get("fieldPath") else path
            yield Problem(where, rule["message"])
    if isinstance(value, dict):
        for key, prop in schema.get("properties", {}).items():
            if key in value:
                yield from _rules_at(value[key], prop, _join(path, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            yield from _rules_at(item, schema["items"], _join(path, index))


def _pydantic_problems(error: pydantic.ValidationError) -> list[Problem]:
    problems = []
    for item in error.errors():
        path = ""
        for part in item["loc"]:
            path = _join(path, part if isinstance(part, int) else str(part))
        # A validator's own ValueError is already a sentence: pydantic's "Value error, " adds nothing.
        problems.append(Problem(path, str(item["msg"]).removeprefix("Value error, ")))
    return problems


def validate_manifest(obj: Any, *, from_yaml: bool = True) -> tuple[InferenceDeployment | None, list[Problem]]:
    """Validate one decoded manifest. Returns the defaulted model (if it parsed) and the problems.

    ``from_yaml``: the manifest was written in YAML (as most are, and as an object read back from
    the cluster most likely was), so a boolean where a listed word was meant gets a hint to quote
    it; False for a JSON file, where ``false`` is no misread ``Off``.
    """
    if not isinstance(obj, dict):
        return None, [Problem("", f"expected a mapping (a Kubernetes object), got {type(obj).__name__}")]
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if api_version != API_VERSION or kind != KIND:
        return None, [
            Problem(
                "apiVersion" if api_version != API_VERSION else "kind",
                f"expected apiVersion {API_VERSION} and kind {KIND}, got {api_version!r} / {kind!r}",
            )
        ]
    metadata = obj.get("metadata")
    problems: list[Problem] = []
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        problems.append(Problem("metadata.name", "required field is missing"))
    # The name's form is checked by the CRD's own CEL rule below, as the API server checks it.
    schema = openapi_schema()
    obj = whole_floats_to_int(obj, schema)
    problems += _schema_problems(obj, from_yaml)
    # kube-apiserver reports repeated items along with the schema's errors, not after them.
    spec_schema = schema["properties"]["spec"]
    problems += [Problem(path, message) for path, message in duplicate_items(obj.get("spec"), spec_schema, "spec")]
    if problems:
        return None, problems
    try:
        model = InferenceDeployment.model_validate(obj)
    except pydantic.ValidationError as exc:
        return None, _pydantic_problems(exc)
    problems += list(_rules_at(model.to_wire(), schema, ""))
    return model, problems

"""Webhook bodies of Alertmanager (``"version": "4"``) and Grafana (``"version": "1"``), and the
diagnosis target an alert's labels name. Pure: no I/O.

Field sets (unknown keys are ignored: both senders add fields over time):

- Alertmanager ``<webhook_config>`` (prometheus.io/docs/alerting/latest/configuration/#webhook_config;
  ``notify/webhook/webhook.go`` ``Message`` and ``template/template.go`` ``Data``/``Alert``):
  ``version``, ``groupKey``, ``status``, ``receiver``, ``groupLabels``, ``commonLabels``,
  ``commonAnnotations``, ``externalURL``, ``alerts[]`` of ``status``, ``labels``, ``annotations``,
  ``startsAt``, ``endsAt``, ``generatorURL``, ``fingerprint``.
- Grafana's webhook contact point (grafana.com/docs/grafana/latest/alerting/configure-notifications/
  manage-contact-points/integrations/webhook-notifier/; github.com/grafana/alerting
  ``receivers/webhook/v1/webhook.go``): the same plus ``orgId``, ``title``, ``state``, ``message`` and per
  alert ``values``, ``silenceURL``, ``dashboardURL``, ``panelURL``, ``ruleUID``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvpilot.text.safe import one_line

#: a Kubernetes namespace / pod name (RFC 1123 label / subdomain; Kubernetes "Object Names and IDs")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
#: a VLLMServer's pod is ``<server>-<5 hex>`` (kvpilot.render pod_name)
_POD_OF_SERVER = re.compile(r"(?P<server>.+)-[0-9a-f]{5}")
#: the longest label value taken (model names are Hugging Face ids: org/name, 96 + 96 characters)
MAX_LABEL_CHARS = 253
#: default most alerts one body may carry (``--max-alerts``): Alertmanager's ``webhook_config``
#: ``max_alerts`` (0 = all) truncates a group to what the receiver takes
MAX_ALERTS = 100
#: characters of a sender's key or value quoted in an error message
_QUOTED_CHARS = 40


class BodyError(ValueError):
    """The body is not JSON (not UTF-8, malformed, a number or nesting Python cannot read): HTTP 400."""


class PayloadShapeError(ValueError):
    """The body is JSON but neither sender's shape (the message names the field): HTTP 422."""


class TooManyAlertsError(PayloadShapeError):
    """The body carries more alerts than the receiver takes (``--max-alerts``): HTTP 413."""


class TargetError(ValueError):
    """An alert's labels do not name a target that may be queried (the message names the label)."""


def _refuse_constant(name: str) -> Any:
    raise BodyError(f"body: {name} is not a JSON number (RFC 8259)")


def decode_body(raw: bytes) -> Any:
    """A webhook body decoded: UTF-8 JSON (RFC 8259: JSON between systems is UTF-8; ``NaN`` and
    ``Infinity`` are not JSON numbers).

    Every failure is one :class:`BodyError` naming what is wrong, never quoting the body: an integer
    of more than Python's 4,300 digits (``sys.get_int_max_str_digits``) or nesting deeper than its
    recursion limit (about 1,000 levels) included, which ``json.loads`` raises as ``ValueError`` and
    ``RecursionError``.

    Raises:
        BodyError: the body is not such JSON.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(f"body: not UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise BodyError(f"body: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise BodyError("body: JSON nested too deeply to read") from None
    except BodyError:
        raise
    except ValueError:  # int('9' * 5000): Python refuses integers of more than 4,300 digits
        raise BodyError("body: a number too long to read") from None


def _quoted(value: str) -> str:
    """A sender's key or value as an error message quotes it: one safe line, cut short."""
    return repr(one_line(value, _QUOTED_CHARS))


@dataclass(frozen=True)
class Alert:
    """One alert of a notification."""

    status: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    fingerprint: str
    starts_at: str = ""

    @property
    def name(self) -> str:
        """The ``alertname`` label ("" when absent)."""
        return self.labels.get("alertname", "")

    @property
    def firing(self) -> bool:
        """True for a firing alert (``status: firing``); resolved ones need no diagnosis."""
        return self.status == "firing"


@dataclass(frozen=True)
class Notification:
    """A webhook body: ``sender`` is ``alertmanager`` or ``grafana``."""

    sender: str
    receiver: str
    status: str
    alerts: list[Alert] = field(default_factory=list)
    group_key: str = ""
    external_url: str = ""


def _str_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PayloadShapeError(f"{where}: expected an object of strings")
    out = {}
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise PayloadShapeError(f"{where}.{one_line(k, _QUOTED_CHARS)}: expected a string")
        out[k] = v
    return out


def _optional_str(value: Any, where: str) -> str:
    """A string field that may be absent or null ("" then)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise PayloadShapeError(f"{where}: expected a string")
    return value


def _fingerprint(labels: Mapping[str, str]) -> str:
    """A stand-in fingerprint (sha256 of the sorted labels) for a sender that sent none."""
    text = "\xff".join(f"{k}\xff{v}" for k, v in sorted(labels.items()))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def parse_notification(body: Any, max_alerts: int | None = None) -> Notification:
    """The :class:`Notification` of a decoded JSON body (:func:`decode_body`).

    Args:
        body: the decoded JSON.
        max_alerts: most alerts taken (None: any number), checked before any alert is read.

    Raises:
        TooManyAlertsError: more than ``max_alerts`` alerts.
        PayloadShapeError: not an object, an unknown ``version``, or a field of the wrong type.
    """
    if not isinstance(body, Mapping):
        raise PayloadShapeError("body: expected a JSON object")
    version = body.get("version")
    if version == "4":
        sender = "alertmanager"
    elif version == "1":
        sender = "grafana"
    else:
        got = _quoted(version) if isinstance(version, str) else "null" if version is None else type(version).__name__
        raise PayloadShapeError(f"version: expected '4' (Alertmanager) or '1' (Grafana), got {got}")
    alerts_raw = body.get("alerts")
    if not isinstance(alerts_raw, list):
        raise PayloadShapeError("alerts: expected a list")
    if max_alerts is not None and len(alerts_raw) > max_alerts:
        raise TooManyAlertsError(
            f"alerts: {len(alerts_raw):,} alerts, more than the {max_alerts:,} this receiver takes in one body "
            "(Alertmanager: set max_alerts in the webhook_config)"
        )
    alerts = []
    for i, raw in enumerate(alerts_raw):
        if not isinstance(raw, Mapping):
            raise PayloadShapeError(f"alerts[{i}]: expected an object")
        status = raw.get("status")
        if status not in ("firing", "resolved"):
            raise PayloadShapeError(f"alerts[{i}].status: expected 'firing' or 'resolved'")
        labels = _str_map(raw.get("labels"), f"alerts[{i}].labels")
        fingerprint = _optional_str(raw.get("fingerprint"), f"alerts[{i}].fingerprint")
        alerts.append(
            Alert(
                status=status,
                labels=labels,
                annotations=_str_map(raw.get("annotations"), f"alerts[{i}].annotations"),
                fingerprint=fingerprint or _fingerprint(labels),
                starts_at=_optional_str(raw.get("startsAt"), f"alerts[{i}].startsAt"),
            )
        )
    return Notification(
        sender=sender,
        receiver=_optional_str(body.get("receiver"), "receiver"),
        status=_optional_str(body.get("status"), "status"),
        alerts=alerts,
        group_key=_optional_str(body.get("groupKey"), "groupKey"),
        external_url=_optional_str(body.get("externalURL"), "externalURL"),
    )


@dataclass(frozen=True)
class Target:
    """What to diagnose: the selectors of ``kvpilot diagnose`` (empty = not restricted)."""

    namespace: str = ""
    pod: str = ""
    server: str = ""
    model_name: str = ""

    def to_json(self) -> dict[str, str]:
        """``{"namespace", "pod", "server", "model_name"}``."""
        return {"namespace": self.namespace, "pod": self.pod, "server": self.server, "model_name": self.model_name}


def _clean(labels: Mapping[str, str], name: str) -> str:
    value = labels.get(name, "")
    if len(value) > MAX_LABEL_CHARS:
        raise TargetError(f"label {name}: longer than {MAX_LABEL_CHARS} characters")
    if not value.isprintable():  # categories Cc, Cf, Cs, Co, Cn, Zl, Zp: controls, bidi overrides, surrogates
        raise TargetError(f"label {name}: contains control or format characters")
    return value


def target_of(alert: Alert) -> Target:
    """The target an alert names: ``namespace`` and ``pod`` labels (Kubernetes names, checked), the
    VLLMServer from a ``server`` label or the pod's ``<server>-<5 hex>`` name, ``model_name`` as is.

    Raises:
        TargetError: a label that is not a valid value of its kind (names the label), or no
            ``namespace``/``pod``/``server`` at all (an alert about every vLLM server is not diagnosed).
    """
    labels = alert.labels
    namespace, pod, server = _clean(labels, "namespace"), _clean(labels, "pod"), _clean(labels, "server")
    model_name = _clean(labels, "model_name")
    if namespace and not _DNS_LABEL.fullmatch(namespace):
        raise TargetError("label namespace: not a Kubernetes namespace name")
    for name, value in (("pod", pod), ("server", server)):
        if value and not _DNS_SUBDOMAIN.fullmatch(value):
            raise TargetError(f"label {name}: not a Kubernetes object name")
    if not (namespace or pod or server):
        raise TargetError("labels: no namespace, pod or server label names a target")
    if pod and not server:
        m = _POD_OF_SERVER.fullmatch(pod)
        server = m.group("server") if m else ""
    return Target(namespace=namespace, pod=pod, server=server, model_name=model_name)

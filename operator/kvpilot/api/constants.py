"""Names of the VLLMServer API (docs/crd-reference.md)."""

from typing import Literal, get_args

GROUP = "kvpilot.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "VLLMServer"
PLURAL = "vllmservers"
SINGULAR = "vllmserver"
SHORT_NAMES = ["vllms"]
CRD_NAME = f"{PLURAL}.{GROUP}"

#: Labels kvpilot sets on the Pod and the Service (docs/crd-reference.md, "What every pod gets");
#: ``podLabels`` may not override them.
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_SERVER = "kvpilot.dev/server"
#: Pod annotations set by kvpilot (a model id such as ``Qwen/Qwen2.5-1.5B-Instruct`` is not a
#: valid label value, so the model goes into an annotation; the spec hash the pod was made from).
ANNOTATION_MODEL = "kvpilot.dev/model"
ANNOTATION_SPEC_HASH = "kvpilot.dev/spec-hash"
#: ``status`` field where kopf keeps its bookkeeping (kopf's status storages' default layout:
#: ``status.kopf.progress``, ``status.kopf.last-handled-configuration``): in status, so a new
#: server's status and kopf's record go out in one ``/status`` request.
STATUS_KOPF = "kopf"

#: ``spec.engine.kvCacheDtype``'s values (and ``kvpilot kv --kv-cache-dtype``'s): ``CacheDType`` of
#: ``vllm/config/cache.py`` (v0.11.1 … v0.16.0: auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc,
#: fp8_ds_mla). ``fp8_inc`` (Intel Gaudi) and ``fp8_ds_mla`` (DeepSeek MLA
#: kernels) are accepted because vLLM accepts them; ``float16`` is not a vLLM choice.
KVCacheDtype = Literal["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"]
KV_CACHE_DTYPES: tuple[str, ...] = get_args(KVCacheDtype)

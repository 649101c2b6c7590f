"""Names of the VLLMServer API (design.md "The resource")."""

GROUP = "kvpilot.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "VLLMServer"
PLURAL = "vllmservers"
SINGULAR = "vllmserver"
SHORT_NAMES = ["vllms"]
CRD_NAME = f"{PLURAL}.{GROUP}"

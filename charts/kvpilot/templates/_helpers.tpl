{{/* Prefix of every object's name: fullnameOverride, else the release name. */}}
{{- define "kvpilot.prefix" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "kvpilot.operator" -}}
{{- include "kvpilot.prefix" . }}-operator
{{- end -}}

{{- define "kvpilot.alertHook" -}}
{{- include "kvpilot.prefix" . }}-alert-hook
{{- end -}}

{{- define "kvpilot.serviceAccount" -}}
{{- default (include "kvpilot.operator" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "kvpilot.image" -}}
{{- .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}

{{/* Labels of every object (Kubernetes recommended labels). */}}
{{- define "kvpilot.labels" -}}
app.kubernetes.io/part-of: kvpilot
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "kvpilot.operatorSelector" -}}
app.kubernetes.io/name: {{ include "kvpilot.operator" . }}
{{- end -}}

{{- define "kvpilot.alertHookSelector" -}}
app.kubernetes.io/name: {{ include "kvpilot.alertHook" . }}
{{- end -}}

{{/* The restricted Pod Security Standard, for the operator's and the hook's containers. */}}
{{- define "kvpilot.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "kvpilot.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* true when a watched namespace is a kopf glob (needs list/watch on namespaces). */}}
{{- define "kvpilot.hasGlob" -}}
{{- if regexMatch "[*?\\[]" (join "," .Values.watch.namespaces) }}true{{ end -}}
{{- end -}}

{{/* RBAC rules on namespaced resources (manifests/operator/20-clusterrole.yaml says why each verb). */}}
{{- define "kvpilot.namespacedRules" -}}
- apiGroups: ["kvpilot.dev"]
  resources: ["vllmservers"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["kvpilot.dev"]
  resources: ["vllmservers/status"]
  verbs: ["get", "patch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "delete"]
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "create"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get"]
- apiGroups: ["kopf.dev"]
  resources: ["kopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end -}}

{{/* RBAC rules on cluster-scoped resources. */}}
{{- define "kvpilot.clusterRules" -}}
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get"]
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["get", "list", "watch"]
{{- if or .Values.watch.allNamespaces (include "kvpilot.hasGlob" .) }}
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["list", "watch"]
{{- end }}
{{- if .Values.watch.allNamespaces }}
- apiGroups: ["kopf.dev"]
  resources: ["clusterkopfpeerings"]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
{{- end -}}

{{/*
Names and labels, in the usual Helm shape.
*/}}
{{- define "lagpilot.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: <release>-lagpilot, or the release name when it already contains the chart name. */}}
{{- define "lagpilot.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "lagpilot.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "lagpilot.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lagpilot.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "lagpilot.labels" -}}
helm.sh/chart: {{ include "lagpilot.chart" . }}
app.kubernetes.io/name: {{ include "lagpilot.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: lagpilot
{{- end }}

{{- define "lagpilot.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "lagpilot.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "lagpilot.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "lagpilot.drainServiceAccountName" -}}
{{- default (printf "%s-drain" (include "lagpilot.fullname" .)) .Values.drain.serviceAccount.name }}
{{- end }}

{{/* Namespaces that get the drain ServiceAccount + Role, one per line. */}}
{{- define "lagpilot.drainNamespaces" -}}
{{- $ns := .Values.drain.namespaces }}
{{- if not $ns }}
{{- $ns = .Values.watchNamespaces | default (list .Release.Namespace) }}
{{- end }}
{{- range $ns }}
{{ . }}
{{- end }}
{{- end }}

{{/*
The operator's rules on namespaced resources: bound cluster-wide (ClusterRole) when it watches all
namespaces, or as a Role in each watched namespace. Exactly what docs/rbac.md lists (the operator's
authors keep it); tests/unit/test_chart_rbac.py compares the two and fails on any `*`.
*/}}
{{- define "lagpilot.operatorNamespacedRules" -}}
# kopf: the watch stream behind every handler and daemon (it never GETs single objects)
- apiGroups: ["lagpilot.io"]
  resources: ["batchconsumergroups"]
  verbs: ["list", "watch", "patch"]
# status is written only through the status subresource (one merge patch per changed cycle); read
# (get) before the status.drain writes the next cycle depends on: resourceVersion-guarded patches
- apiGroups: ["lagpilot.io"]
  resources: ["batchconsumergroups/status"]
  verbs: ["get", "patch"]
# ownerReferences with blockOwnerDeletion on the Deployment/Job need update on the owner's
# finalizers where the OwnerReferencesPermissionEnforcement admission plugin is on (e.g. OpenShift)
- apiGroups: ["lagpilot.io"]
  resources: ["batchconsumergroups/finalizers"]
  verbs: ["update"]
# the consumer Deployment: watched into a cache (list, watch), read by name on a cache miss, server-side
# applied (a PATCH; the apply that creates a missing Deployment is also authorized as create: 403
# without it); garbage collection deletes it
# (delete: the warm drain runtime's Deployment when spec.drain.warmRuntime is turned off)
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# the drain Job: read the one named in status, create one per attempt, delete on cancel
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "create", "delete"]
{{- if .Values.rbac.sparkApplications }}
# spec.drain.launcher sparkApplication: the same, as a kubeflow spark-operator SparkApplication
- apiGroups: ["sparkoperator.k8s.io"]
  resources: ["sparkapplications"]
  verbs: ["get", "create", "delete"]
{{- end }}
# the drain Job's pods: still running? the termination message of a failed attempt
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list"]
# the controller's memory, ConfigMap <cr>-lagpilot-state (owned by the CR): read once per process,
# server-side applied (the apply that creates it is also authorized as create)
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "create", "patch"]
# kopf posts core/v1 events (scale decisions, Degraded causes)
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# the Kafka credentials Secret named in spec.kafka.secretRef, for the operator's own Kafka admin
# connection (values never logged; the pods read it through secretKeyRef, not the operator)
# (create: the warm drain runtime's key Secret <cr>-drain-runtime-key and the hand-off key Secret
# <cr>-handoff-key, both owned by the CR; get reads them back)
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create"]
# the warm drain runtime: its pods are used only when owned through a ReplicaSet by its Deployment
- apiGroups: ["apps"]
  resources: ["replicasets"]
  verbs: ["list"]
# the warm drain runtime's NetworkPolicy (only the CR's drain pods reach it): created, read on 409
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "create"]
{{- end }}

{{/* Leader election: the Lease the operator instances elect with (coordination.k8s.io; create can
not be limited by name, get/update only the Lease named leaderElection.leaseName). */}}
{{- define "lagpilot.leaderElectionRules" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["create"]
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  resourceNames: [{{ .Values.leaderElection.leaseName | quote }}]
  verbs: ["get", "update"]
{{- end }}

{{/* The drain driver's rules: Spark on Kubernetes executors in its own namespace. */}}
{{- define "lagpilot.drainRules" -}}
{{- /* what Spark's client-mode driver calls with the operator's Spark conf (docs/rbac.md): it creates
its executor pods and watches/lists/gets them, and labels a finished one inactive (patch); no delete
(executors end with the driver and are garbage-collected with its pod), no services, no ConfigMaps
(spark_k8s_security_conf). The admission policy limits create and patch to executor pods. */}}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "create", "patch"]
{{- if .Values.drain.rbac.persistentVolumeClaims }}
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "list", "create", "delete", "deletecollection"]
{{- end }}
{{- end }}

{{/*
Names are fixed, as in manifests/: the docs, the runbooks, the alerts (job="gpu-guard") and the
escape hatch (`kubectl delete validatingwebhookconfiguration gpu-guard`) name them. One release
per cluster: a second one stops at the first cluster-scoped object the first release owns.
*/}}

{{- define "gpu-guard.selectorLabels" -}}
app.kubernetes.io/name: gpu-guard
{{- end }}

{{/* Every object's labels: the overlays' one, and Helm's own. */}}
{{- define "gpu-guard.labels" -}}
{{ include "gpu-guard.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | quote }}
{{- end }}

{{/* kube-system, the release namespace and excludedNamespaces, as a JSON list: the webhooks'
namespaceSelector and the guard's exemptions are this one list. */}}
{{- define "gpu-guard.excludedNamespaces" -}}
{{- concat (list "kube-system" .Release.Namespace) .Values.excludedNamespaces | uniq | toJson -}}
{{- end }}

{{/* The guard's configuration (guard.yaml): files/guard.yaml (a copy of
manifests/base/guard.yaml), every policy audit and every mutation off in audit mode, then the
values' policies and mutations merged over it, and the exemptions. */}}
{{- define "gpu-guard.config" -}}
{{- $config := .Files.Get "files/guard.yaml" | fromYaml -}}
{{- $policies := $config.policies -}}
{{- $mutations := $config.mutations -}}
{{- if eq .Values.mode "audit" -}}
{{- range $id, $setting := $policies }}{{ $_ := set $setting "action" "audit" }}{{ end -}}
{{- range $id, $setting := $mutations }}{{ $_ := set $setting "enabled" false }}{{ end -}}
{{- end -}}
{{- range $id, $setting := .Values.policies -}}
{{- $_ := set $policies $id (mergeOverwrite (get $policies $id | default dict) (deepCopy $setting)) -}}
{{- end -}}
{{- range $id, $setting := .Values.mutations -}}
{{- $_ := set $mutations $id (mergeOverwrite (get $mutations $id | default dict) (deepCopy $setting)) -}}
{{- end -}}
{{- $exemptions := dict "namespaces" (include "gpu-guard.excludedNamespaces" . | fromJsonArray) -}}
{{- range $key := list "users" "groups" "objectSelector" -}}
{{- with get $.Values.exemptions $key }}{{ $_ := set $exemptions $key . }}{{ end -}}
{{- end -}}
{{- $_ := set $config "exemptions" $exemptions -}}
{{- with .Values.gpuOperator.version }}{{ $_ := set $config "gpuOperator" (dict "version" .) }}{{ end -}}
{{- if (.Values.dra | default dict).deviceTaintRules }}{{ $_ := set $config "dra" (dict "deviceTaintRules" true) }}{{ end -}}
{{- toYaml $config -}}
{{- end }}

{{- define "gpu-guard.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{- define "gpu-guard.certManager" -}}
{{- if eq .Values.certificates.mode "certManager" }}true{{ end -}}
{{- end }}

{{/* What the schema cannot say: combinations of values, and the CRDs an enabled feature needs.
Each message names the value to change. */}}
{{- define "gpu-guard.checks" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) -}}
{{- fail (printf "replicas: %d replicas need leaderElection.enabled=true, or each would audit and write the PolicyReports" (int .Values.replicas)) -}}
{{- end -}}
{{- include "gpu-guard.enforceWhenReady" . -}}
{{- if .Values.checkCRDs -}}
{{- $needs := list -}}
{{- if include "gpu-guard.certManager" . -}}
{{- $needs = append $needs (list "certificates.mode=certManager" "cert-manager.io/v1/Certificate" "certificates.cert-manager.io") -}}
{{- if not .Values.certificates.certManager.issuerRef -}}
{{- $needs = append $needs (list "certificates.mode=certManager" "cert-manager.io/v1/Issuer" "issuers.cert-manager.io") -}}
{{- end -}}
{{- end -}}
{{- if .Values.monitoring.serviceMonitor.enabled -}}
{{- $needs = append $needs (list "monitoring.serviceMonitor.enabled" "monitoring.coreos.com/v1/ServiceMonitor" "servicemonitors.monitoring.coreos.com") -}}
{{- end -}}
{{- if .Values.monitoring.prometheusRule.enabled -}}
{{- $needs = append $needs (list "monitoring.prometheusRule.enabled" "monitoring.coreos.com/v1/PrometheusRule" "prometheusrules.monitoring.coreos.com") -}}
{{- end -}}
{{- range $need := $needs -}}
{{- if not ($.Capabilities.APIVersions.Has (index $need 1)) -}}
{{- fail (printf "%s: the cluster does not serve %s: install the CRD %s first (or set checkCRDs=false when rendering without the cluster's API versions)" (index $need 0) (index $need 1) (index $need 2)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* mode=enforce makes the ClusterPolicy webhook (and before 1.30 the node-label one) fail closed: reached from
another mode only while the guard's Deployment has a ready replica to answer them, or every
GPU-mode relabel fails ("no endpoints available for service gpu-guard"). The Deployment is
looked up: under `helm template` and a client-side --dry-run, lookup finds nothing, and neither
does a first install (install in audit first: README). The Deployment's gpu-guard.io/mode
annotation says which mode is deployed, so an upgrade that stays in enforce (a repair, a new
image) is never refused. */}}
{{- define "gpu-guard.enforceWhenReady" -}}
{{- if eq .Values.mode "enforce" -}}
{{- $deployment := lookup "apps/v1" "Deployment" .Release.Namespace "gpu-guard" -}}
{{- if $deployment -}}
{{- $deployed := dig "metadata" "annotations" "gpu-guard.io/mode" "" $deployment -}}
{{- $ready := int (dig "status" "readyReplicas" 0 $deployment) -}}
{{- if and (ne $deployed "enforce") (lt $ready 1) -}}
{{- fail (printf "mode=enforce: deployment/gpu-guard in %s has %d ready replicas of %d, so the webhooks would fail closed with no one to answer them; wait for it (kubectl -n %s rollout status deployment/gpu-guard), then upgrade again" .Release.Namespace $ready (int (dig "spec" "replicas" 0 $deployment)) .Release.Namespace) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The objects of a file copied from manifests/ (list root file drop [patch]): each in the
release namespace if it is namespaced, its ServiceAccount subjects too, with the chart's labels;
the objects named "Kind/name" in drop left out. patch (optional): a copied JSON patch of the
audit overlay's that tests a policy variable's name and replaces its expression
(files/record-audit.yaml), applied to the policies with that variable, whose bindings then
record only (validationActions [Audit]), as the audit overlay does. */}}
{{- define "gpu-guard.fromFile" -}}
{{- $root := index . 0 -}}
{{- $drop := index . 2 -}}
{{- $variable := "" -}}
{{- $expression := "" -}}
{{- if gt (len .) 3 -}}
{{- range $op := $root.Files.Get (index . 3) | fromYamlArray -}}
{{- if eq $op.op "test" }}{{ $variable = $op.value }}{{ else }}{{ $expression = $op.value }}{{ end -}}
{{- end -}}
{{- end -}}
{{- range $doc := splitList "\n---\n" ($root.Files.Get (index . 1)) -}}
{{- $obj := fromYaml $doc -}}
{{- if and $obj (not (has (printf "%s/%s" $obj.kind $obj.metadata.name) $drop)) }}
{{- if hasKey $obj.metadata "namespace" -}}
{{- $_ := set $obj.metadata "namespace" $root.Release.Namespace -}}
{{- end -}}
{{- range $subject := $obj.subjects | default list -}}
{{- if hasKey $subject "namespace" }}{{ $_ := set $subject "namespace" $root.Release.Namespace }}{{ end -}}
{{- end -}}
{{- $paramRef := dig "spec" "paramRef" dict $obj -}}
{{- if hasKey $paramRef "namespace" }}{{ $_ := set $paramRef "namespace" $root.Release.Namespace }}{{ end -}}
{{- if $variable -}}
{{- range $v := dig "spec" "variables" list $obj -}}
{{- if eq $v.name $variable }}{{ $_ := set $v "expression" $expression }}{{ end -}}
{{- end -}}
{{- if eq $obj.kind "ValidatingAdmissionPolicyBinding" }}{{ $_ := set $obj.spec "validationActions" (list "Audit") }}{{ end -}}
{{- end -}}
{{- $labels := include "gpu-guard.labels" $root | fromYaml -}}
{{- $_ := set $obj.metadata "labels" (merge $labels ($obj.metadata.labels | default dict)) }}
---
{{ toYaml $obj }}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The chart's labels with the value's own (list root labels) over them. */}}
{{- define "gpu-guard.labelsWith" -}}
{{- $labels := include "gpu-guard.labels" (index . 0) | fromYaml -}}
{{- toYaml (mergeOverwrite $labels ((index . 1) | default dict)) -}}
{{- end }}

{{/* Non-empty when the API server serves admissionregistration.k8s.io/v1
ValidatingAdmissionPolicy (Kubernetes 1.30 and later): the guard's own-rights policy needs it.
By version, so that `helm template` without a cluster renders it too (its default version is
its own client's); --kube-version 1.29 or a 1.29 cluster leaves it out. */}}
{{- define "gpu-guard.servesAdmissionPolicies" -}}
{{- if semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version -}}true{{- end -}}
{{- end }}

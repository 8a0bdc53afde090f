{{/* The release's resource names and labels. */}}
{{- define "edgert.name" -}}
{{- printf "%s-edgert" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "edgert.labels" -}}
app.kubernetes.io/name: edgert
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "edgert.image" -}}
{{ printf "%s:%s" .Values.image.repository .Values.image.tag }}
{{- end -}}

{{/* The Secret that holds camera and broker credentials (ours, or the user's own). */}}
{{- define "edgert.secretName" -}}
{{- .Values.camera.existingSecret | default (printf "%s-credentials" (include "edgert.name" .)) -}}
{{- end -}}

{{- define "edgert.hasCredentials" -}}
{{- if or .Values.camera.existingSecret .Values.camera.credentials -}}yes{{- end -}}
{{- end -}}

{{/* The site file `edgert camera --config` runs: camera.site as given, with the metrics address
     the probes ask (camera.metricsPort, in place of any given) and no window. toYaml writes it; the ConfigMap holds it
     as one string, so no value can add a key to a resource. */}}
{{- define "edgert.site" -}}
{{- $c := .Values.camera -}}
{{- include "edgert.checkCamera" . -}}
{{- $site := deepCopy $c.site -}}
{{- $telemetry := deepCopy (default (dict) $site.telemetry) -}}
{{- $_ := set $telemetry "metrics" (printf "0.0.0.0:%d" (int $c.metricsPort)) -}}
{{- $_ := set $site "telemetry" $telemetry -}}
{{- $outputs := deepCopy (default (dict) $site.outputs) -}}
{{- $_ := set $outputs "headless" true -}}
{{- $_ := set $site "outputs" $outputs -}}
{{- toYaml $site -}}
{{- end -}}

{{/* What the schema cannot say: credentials given twice or written into a URI, a port taken
     twice. */}}
{{- define "edgert.checkCamera" -}}
{{- $c := .Values.camera -}}
{{- if and $c.existingSecret $c.credentials -}}
{{- fail (printf "camera.credentials: not used with camera.existingSecret (%s): put them in that Secret" $c.existingSecret) -}}
{{- end -}}
{{- range $name, $cam := $c.site.cameras -}}
{{- if regexMatch "^[A-Za-z0-9+.-]+://[^/@]*:[^$/@][^/@]*@" (toString $cam.source) -}}
{{- fail (printf "camera.site.cameras.%s.source: a password is written in the URI: give ${EDGERT_NAME} there and the value in camera.credentials (a Secret)" $name) -}}
{{- end -}}
{{- end -}}
{{- range $i, $out := dig "outputs" "uris" (list) $c.site -}}
{{- if regexMatch (printf "^[a-z0-9+]+://[^/]*:%d(/|$)" (int $c.metricsPort)) $out -}}
{{- fail (printf "camera.site.outputs.uris.%d: %s takes camera.metricsPort (%d), where /metrics, /live and /ready answer: give the output another port" $i $out (int $c.metricsPort)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A container's resources, with the GPU from the device plugin when asked for. */}}
{{- define "edgert.resources" -}}
{{- $r := deepCopy .resources -}}
{{- if .gpu -}}
{{- $limits := merge (dict "nvidia.com/gpu" 1) (default (dict) $r.limits) -}}
{{- $_ := set $r "limits" $limits -}}
{{- end -}}
{{- toYaml $r -}}
{{- end -}}

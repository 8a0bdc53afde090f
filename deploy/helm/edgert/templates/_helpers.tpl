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
{{- $any := "" -}}
{{- $own := .Values.camera.existingSecret -}}
{{- range .Values.camera.cameras -}}{{- if or .username .password (and .auth $own) -}}{{- $any = "yes" -}}{{- end -}}{{- end -}}
{{- $m := .Values.camera.mqtt -}}
{{- if or $m.username $m.password (and $m.auth $own) -}}{{- $any = "yes" -}}{{- end -}}
{{- $s := .Values.camera.store -}}
{{- if and $s.uri (or $s.username $s.password (and $s.auth $own)) -}}{{- $any = "yes" -}}{{- end -}}
{{- if $any -}}yes{{- end -}}
{{- end -}}

{{/* A URI with the credentials as edgert's ${EDGERT_...} references (expanded by edgert, not
     by Kubernetes, which expands $(NAME) only): the value never reaches an argument. */}}
{{- define "edgert.withCredentials" -}}
{{- $parts := splitList "://" .uri -}}
{{- if or .username .password .auth -}}
{{- $user := ternary (printf "${%s_USER}" .prefix) "" (or (not (empty .username)) (not (empty .auth))) -}}
{{- $pass := ternary (printf ":${%s_PASSWORD}" .prefix) "" (or (not (empty .password)) (not (empty .auth))) -}}
{{- printf "%s://%s%s@%s" (first $parts) $user $pass (join "://" (rest $parts)) -}}
{{- else -}}
{{- .uri -}}
{{- end -}}
{{- end -}}

{{/* `edgert camera`'s arguments, one per line of a YAML list. */}}
{{- define "edgert.cameraArgs" -}}
{{- $c := .Values.camera -}}
{{- include "edgert.checkCamera" . -}}
- camera
- {{ printf "/models/%s" $c.model.bundle | quote }}
{{- range $i, $cam := $c.cameras }}
- --source
- {{ include "edgert.withCredentials" (dict "uri" $cam.uri "username" $cam.username "password" $cam.password "auth" (and $cam.auth $c.existingSecret) "prefix" (printf "EDGERT_CAM%d" $i)) | quote }}
{{- range $cam.lines }}
- --line
- {{ printf "%d:%s" $i . | quote }}
{{- end }}
{{- range $cam.zones }}
- --zone
- {{ printf "%d:%s" $i . | quote }}
{{- end }}
{{- end }}
- --headless
- --json
- --metrics
- {{ printf "0.0.0.0:%d" (int $c.metricsPort) | quote }}
{{- with $c.model.task }}
- --task
- {{ . | quote }}
{{- end }}
- --backend
- {{ $c.model.backend | quote }}
- --precision
- {{ $c.model.precision | quote }}
- --conf
- {{ $c.model.conf | quote }}
{{- if $c.track }}
- --track
{{- end }}
{{- if $c.events }}
- --events
- /data/events.jsonl
{{- end }}
{{- if $c.jsonl }}
- --jsonl
- /data/frames.jsonl
{{- end }}
{{- range $c.outputs }}
- --output
- {{ . | quote }}
{{- end }}
{{- with $c.mqtt.uri }}
- --mqtt
- {{ include "edgert.withCredentials" (dict "uri" . "username" $c.mqtt.username "password" $c.mqtt.password "auth" (and $c.mqtt.auth $c.existingSecret) "prefix" "EDGERT_MQTT") | quote }}
{{- end }}
{{- with $c.store.uri }}
{{- $uri := include "edgert.withCredentials" (dict "uri" . "username" $c.store.username "password" $c.store.password "auth" (and $c.store.auth $c.existingSecret) "prefix" "EDGERT_STORE") }}
- --store
- {{ printf "%s%sdevice=${EDGERT_NODE_NAME}&spool=/data/store-spool.jsonl" $uri (ternary "&" "?" (contains "?" $uri)) | quote }}
{{- end }}
{{- with $c.gate }}
- --gate
- {{ . | quote }}
{{- end }}
{{- if $c.targetFps }}
- --target-fps
- {{ $c.targetFps | quote }}
{{- end }}
{{- if $c.powerCap }}
- --power-cap
- {{ $c.powerCap | quote }}
{{- end }}
{{- if $c.tempCap }}
- --temp-cap
- {{ $c.tempCap | quote }}
{{- end }}
{{- if $c.swapCheck }}
- --swap-check
{{- end }}
{{- with $c.model.previous }}
- --check-against
- {{ printf "/models/%s" . | quote }}
{{- end }}
{{- range $c.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* What the schema cannot say: credentials that would be dropped, a port taken twice. */}}
{{- define "edgert.checkCamera" -}}
{{- $c := .Values.camera -}}
{{- range $i, $cam := $c.cameras -}}
{{- if and $c.existingSecret (or $cam.username $cam.password) -}}
{{- fail (printf "camera.cameras.%d: username/password are not used with camera.existingSecret (%s): put them in that Secret as EDGERT_CAM%d_USER / EDGERT_CAM%d_PASSWORD and set auth: true" $i $c.existingSecret $i $i) -}}
{{- end -}}
{{- end -}}
{{- if and $c.existingSecret (or $c.mqtt.username $c.mqtt.password) -}}
{{- fail (printf "camera.mqtt: username/password are not used with camera.existingSecret (%s): put them in that Secret as EDGERT_MQTT_USER / EDGERT_MQTT_PASSWORD and set auth: true" $c.existingSecret) -}}
{{- end -}}
{{- if and $c.existingSecret (or $c.store.username $c.store.password) -}}
{{- fail (printf "camera.store: username/password are not used with camera.existingSecret (%s): put them in that Secret as EDGERT_STORE_USER / EDGERT_STORE_PASSWORD and set auth: true" $c.existingSecret) -}}
{{- end -}}
{{- range $i, $out := $c.outputs -}}
{{- if regexMatch (printf "^[a-z0-9+]+://[^/]*:%d(/|$)" (int $c.metricsPort)) $out -}}
{{- fail (printf "camera.outputs.%d: %s takes camera.metricsPort (%d), where /metrics, /live and /ready answer: give the output another port" $i $out (int $c.metricsPort)) -}}
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

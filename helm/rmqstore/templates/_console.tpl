{{/*
The console's container: HTTP on console.httpPort, reads through the query service on
loopback, mounts the store read-only (topic listing, index file fill, disk use); the consumer
group pages ask the proxy in the same pod when it runs.
*/}}
{{- define "rmqstore.consoleContainer" -}}
{{- $root := .root -}}
{{- $c := $root.Values.console -}}
{{- if not $root.Values.query.enabled }}{{ fail "console.enabled needs query.enabled" }}{{ end -}}
{{- $args := list "-m" "services.console"
      "--store" .storeRoot
      "--query" (printf "127.0.0.1:%d" (int $root.Values.query.grpcPort))
      "--commitlog" .writer
      "--listen" (printf "0.0.0.0:%d" (int $c.httpPort))
      "--index-entries" (printf "%d" (int64 $root.Values.indexFile.entries))
      "--max-window" (printf "%d" (int64 $c.maxWindowSeconds))
      "--auth" $c.auth -}}
{{- if and $root.Values.proxy.enabled (not $root.Values.readOnly) }}
{{- $args = concat $args (list "--proxy" (printf "127.0.0.1:%d" (int $root.Values.proxy.grpcPort))) }}
{{- if include "rmqstore.accessKeys" $root }}
{{- $args = concat $args (include "rmqstore.accessKeyArgs" $root | fromYamlArray) }}
{{- end }}
{{- end }}
{{- range $c.allowedHosts }}
{{- $args = concat $args (list "--allowed-host" .) }}
{{- end }}
{{- if eq $c.auth "basic" }}
{{- $args = concat $args (list "--users-file" "/etc/rmqstore/console/users") }}
{{- if and $c.ingress.enabled $c.ingress.tls }}
{{- $args = concat $args (list "--secure-cookie") }}
{{- end }}
{{- else }}
{{- if not $c.trustedProxies }}{{ fail "console.auth proxy-header needs console.trustedProxies" }}{{ end }}
{{- range $c.trustedProxies }}
{{- $args = concat $args (list "--trusted-proxy" .) }}
{{- end }}
{{- $args = concat $args (list "--identity-header" $c.identityHeader) }}
{{- end }}
- name: console
  image: {{ include "rmqstore.image" $root | quote }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  command: [python]
  args:
    {{- toYaml $args | nindent 4 }}
    {{- with $c.extraArgs }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: http-console
      containerPort: {{ $c.httpPort }}
      protocol: TCP
  env:
    - name: PYTHONUNBUFFERED
      value: "1"
    - name: PYTHONDONTWRITEBYTECODE
      value: "1"
    {{- if $root.Values.tls.enabled }}
    - name: RMQSTORE_TLS_CERT
      value: /etc/rmqstore/tls/tls.crt
    - name: RMQSTORE_TLS_KEY
      value: /etc/rmqstore/tls/tls.key
    - name: RMQSTORE_TLS_CA
      value: /etc/rmqstore/tls/ca.crt
    {{- with $root.Values.tls.serverName }}
    - name: RMQSTORE_TLS_SERVER_NAME
      value: {{ . | quote }}
    {{- end }}
    {{- end }}
    {{- with $root.Values.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  readinessProbe:
    httpGet:
      path: /healthz
      port: http-console
    periodSeconds: 10
  livenessProbe:
    httpGet:
      path: /healthz
      port: http-console
    periodSeconds: 20
    failureThreshold: 3
  resources:
    {{- toYaml $c.resources | nindent 4 }}
  securityContext:
    {{- include "rmqstore.securityContext" $root | nindent 4 }}
  volumeMounts:
    - name: data
      mountPath: {{ $root.Values.storeMountPath }}
      readOnly: true
    - name: tmp
      mountPath: /tmp
    {{- if $root.Values.tls.enabled }}
    - name: tls
      mountPath: /etc/rmqstore/tls
      readOnly: true
    {{- end }}
    {{- if eq $c.auth "basic" }}
    - name: console-users
      mountPath: /etc/rmqstore/console
      readOnly: true
    {{- end }}
    {{- if include "rmqstore.accessKeys" $root }}
    - name: access-key
      mountPath: /etc/rmqstore/access-key
      readOnly: true
    {{- end }}
{{- end }}

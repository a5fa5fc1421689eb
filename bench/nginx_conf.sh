# Sourced by bench/proxy_*.sh: nginx_conf DIR BACKEND_PORT LISTEN_PORT writes DIR/nginx/nginx.conf,
# the peer every proxy benchmark measures against: Debian's nginx-light, one worker, no master,
# upstream keep-alive (64 connections, no request limit), no access log, loopback only.
nginx_conf() {
  local d=$1 be=$2 port=$3
  mkdir -p "$d/nginx/tmp"
  cat > "$d/nginx/nginx.conf" <<NG
daemon off; master_process off; worker_processes 1; pid $d/nginx/nginx.pid;
error_log $d/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $d/nginx/tmp; proxy_temp_path $d/nginx/tmp; fastcgi_temp_path $d/nginx/tmp;
  uwsgi_temp_path $d/nginx/tmp; scgi_temp_path $d/nginx/tmp;
  upstream be { server 127.0.0.1:$be; keepalive 64; keepalive_requests 10000000; }
  keepalive_requests 10000000;
  server { listen 127.0.0.1:$port; keepalive_requests 10000000;
    location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; } }
}
NG
}

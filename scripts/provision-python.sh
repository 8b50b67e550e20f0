# Sourced by bootstrap.sh only when it found no usable Python (a job in a `container:` image
# such as nvidia/cuda:*-base, which has none): bring one, the way the `install-python` input says.
#   auto     uv when on PATH; else, as root, the image's package manager; else a pinned uv
#   system   as root, the image's package manager only (nothing downloaded from elsewhere)
#   managed  uv (on PATH, or the pinned one downloaded) installs a uv-managed Python
# Linux only. Defines provision_python, which sets `python` (and `provision_how`) or fails.
# Nothing here runs when a usable Python exists: bootstrap.sh sources this file only then.

# The pinned uv: the static musl build from its PyPI wheel (hash-pinned like every other
# dependency; runs on glibc and musl images alike). Wheels are zip files and the image may
# have no unzip and no Python, so the binary's place in the wheel is pinned too: gzip
# inflates it (and checks its CRC-32 and size), then its own sha256 is checked.
UV_VERSION=0.13.9
uv_pin() {  # <arch> -> "url wheel_sha256 offset compressed_size crc32 size binary_sha256"
  case "$1" in
    x86_64|amd64) echo "https://files.pythonhosted.org/packages/fe/fe/794884de0efd3ac77a427cab21aa72c0483e100c55a42cd5cbb02c141b84/uv-0.13.9-py3-none-musllinux_1_1_x86_64.whl" \
      2c45530751517d6c3bbc69a19473f6effe47cce047bede01ffd8af7ea7b36b25 \
      2336 18978880 0x05d938db 44198984 \
      edbfb9a3d00dc84148e6691cd8740781fdc32db6505d7ef88ba6c3e569d5bec9 ;;
    aarch64|arm64) echo "https://files.pythonhosted.org/packages/57/15/94b6cd62ac3ff6550288328e8035288875197cbc183f51554b266a69877b/uv-0.13.9-py3-none-manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1_aarch64.whl" \
      5435c5ce14a56431208ca0996416d310f1598e8c2c8ba707688985a16bb82dbe \
      2336 17717972 0xbb840a6b 35584104 \
      bbecb5ac518030bb5e84f1999c577228460192832ac24a92bd772735682979f4 ;;
    *) return 1 ;;
  esac
}
#: The Python uv installs (uv pins the exact build it downloads for each of its versions).
UV_PYTHON="${GPU_CI_UV_PYTHON:-3.12}"

prov_note() { echo "gpu-ci bootstrap: $*" >&2; }
prov_fail() {  # the reason goes into bootstrap.sh's one error, which ends the job
  provision_error="$*"
  no_python
}

# A directory only this user writes, kept for the job (per job on self-hosted runners, as
# bootstrap.py keeps its venvs) or across jobs when the admin set GPU_CI_CACHE_DIR.
prov_home() {
  local base="${GPU_CI_CACHE_DIR:-}"
  if [ -z "$base" ] && [ "${RUNNER_ENVIRONMENT:-}" = self-hosted ]; then base="${RUNNER_TEMP:-}"; fi
  [ -n "$base" ] || base="${RUNNER_TOOL_CACHE:-${RUNNER_TEMP:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}}}"
  printf '%s/gpu-ci-actions/python' "$base"
}

# The venvs' rule (bootstrap.py's _foreign), for the home before anything in it is reused or
# added to: every entry owned by this user or root and, unless a link, writable by no one else.
prov_foreign() {  # <path> [find options]: "<entry> is <why>" for the first foreign entry, or ''
  local path="$1" uid out
  shift
  [ -e "$path" ] || [ -L "$path" ] || return 0
  command -v find >/dev/null 2>&1 || { echo "$path cannot be checked (no find in this image)"; return 0; }
  uid="$(id -u)"
  out="$(find "$path" "$@" ! -user "$uid" ! -user 0 -print 2>/dev/null)" \
    || { echo "$path cannot be read through"; return 0; }
  [ -z "$out" ] || { echo "${out%%$'\n'*} is owned by another user"; return 0; }
  out="$(find "$path" "$@" ! -type l \( -perm -020 -o -perm -002 \) -print 2>/dev/null)"
  [ -z "$out" ] || echo "${out%%$'\n'*} is writable by group or others"
}

prov_check_home() {  # fail unless only this user (or root) could have written the home
  local home why
  home="$(prov_home)"
  why="$(prov_foreign "$(dirname "$home")" -maxdepth 0)"
  [ -n "$why" ] || [ ! -L "$home" ] || why="$home is a symbolic link"
  [ -n "$why" ] || why="$(prov_foreign "$home")"
  [ -z "$why" ] || prov_fail "$why: another user could have planted what the bootstrap would run from there. Give each runner user its own GPU_CI_CACHE_DIR (a directory only that user can write)."
}

prov_sha256() {  # <file> -> hex digest on stdout, with whatever the image has
  if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
  elif command -v shasum >/dev/null 2>&1; then shasum -a 256 "$1" | cut -d' ' -f1
  elif [ -n "${prov_node:-}" ]; then
    "$prov_node" -e 'const c=require("crypto"),f=require("fs");
      process.stdout.write(c.createHash("sha256").update(f.readFileSync(process.argv[1])).digest("hex"))' "$1"
  else return 1
  fi
}

# The Node.js the runner mounts into container jobs (/__e/node*/bin), or one on PATH.
prov_find_node() {
  local cand
  for cand in "$(command -v node 2>/dev/null)" /__e/node24/bin/node /__e/node20/bin/node \
              /__e/node*/bin/node; do
    if [ -n "$cand" ] && [ -x "$cand" ]; then prov_node="$cand"; return 0; fi
  done
  prov_node=""
  return 1
}

prov_download() {  # <url> <out>: curl, wget or Node.js, whichever the image has
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 3 --connect-timeout 20 -o "$2" "$1"
  elif command -v wget >/dev/null 2>&1; then
    wget -q -T 60 -O "$2" "$1"
  elif [ -n "${prov_node:-}" ]; then
    "$prov_node" -e '
      const [url, out] = process.argv.slice(1), fs = require("fs");
      function get(u, left) {
        (u.startsWith("https:") ? require("https") : require("http")).get(u, (res) => {
          if (res.statusCode >= 300 && res.statusCode < 400 && res.headers.location && left) {
            res.resume(); return get(new URL(res.headers.location, u).href, left - 1);
          }
          if (res.statusCode !== 200) { console.error(`HTTP ${res.statusCode} for ${u}`); process.exit(1); }
          res.pipe(fs.createWriteStream(out)).on("finish", () => process.exit(0));
        }).on("error", (e) => { console.error(String(e)); process.exit(1); });
      }
      get(url, 5);' "$1" "$2"
  else
    return 2
  fi
}

le32() {  # <number> -> the printf escapes of its 4 little-endian bytes
  local v=$(($1))
  printf '\\%03o\\%03o\\%03o\\%03o' $((v & 255)) $((v >> 8 & 255)) $((v >> 16 & 255)) $((v >> 24 & 255))
}

# The pinned uv, downloaded (GPU_CI_UV_URL: a mirror of the same wheel) and checked.
prov_fetch_uv() {
  local arch pin url wsha off csize crc size bsha dir tmp got
  prov_check_home
  arch="$(uname -m)"
  pin="$(uv_pin "$arch")" || prov_fail "no pinned uv for machine type $arch: install Python 3.9+ in the image."
  read -r url wsha off csize crc size bsha <<< "$pin"
  url="${GPU_CI_UV_URL:-$url}"
  dir="$(prov_home)/uv-$UV_VERSION-$arch"
  if [ -x "$dir/uv" ] && [ "$(prov_sha256 "$dir/uv")" = "$bsha" ]; then
    uv="$dir/uv"; return 0
  fi
  prov_find_node || true
  command -v gzip >/dev/null 2>&1 || prov_fail "gzip is needed to unpack uv and is not in this image."
  mkdir -p "$dir" || prov_fail "cannot create $dir: set GPU_CI_CACHE_DIR to a writable directory."
  tmp="$(mktemp -d "$dir/.fetch-XXXXXX")"
  prov_note "downloading uv $UV_VERSION from $url"
  local rc=0
  prov_download "$url" "$tmp/uv.whl" || rc=$?
  if [ "$rc" = 2 ]; then
    rm -rf "$tmp"
    prov_fail "no Python, and nothing that can download uv (no curl, wget or Node.js): install Python 3.9+ in the image, or run the job as root so that its package manager can."
  elif [ "$rc" != 0 ]; then
    rm -rf "$tmp"; prov_fail "downloading $url failed (exit code $rc)."
  fi
  got="$(prov_sha256 "$tmp/uv.whl")" || { rm -rf "$tmp"; prov_fail "no sha256 tool (sha256sum, shasum or Node.js) to check the uv download."; }
  if [ "$got" != "$wsha" ]; then
    rm -rf "$tmp"
    prov_fail "the uv download from $url has sha256 $got, not the pinned $wsha: refused (a wrong mirror or a tampered file)."
  fi
  # The wheel's deflate stream of uv-$UV_VERSION.data/scripts/uv, as a gzip member.
  { printf '\037\213\010\000\000\000\000\000\000\003'
    tail -c "+$((off + 1))" "$tmp/uv.whl" | head -c "$csize"
    printf "$(le32 "$crc")$(le32 "$size")"
  } | gzip -dc > "$tmp/uv" 2>/dev/null || { rm -rf "$tmp"; prov_fail "unpacking uv from its wheel failed."; }
  got="$(prov_sha256 "$tmp/uv")" || got="(unreadable)"
  if [ "$got" != "$bsha" ]; then
    rm -rf "$tmp"; prov_fail "the uv binary unpacked from its wheel has sha256 $got, not the pinned $bsha: refused."
  fi
  chmod 755 "$tmp/uv" && mv -f "$tmp/uv" "$dir/uv"
  rm -rf "$tmp"
  prov_note "uv $UV_VERSION verified (sha256 $bsha)"
  uv="$dir/uv"
}

prov_uv_python() {  # a uv-managed Python with $uv, in a directory of our own; 1 when it fails
  local home
  prov_check_home
  home="$(prov_home)"
  export UV_PYTHON_INSTALL_DIR="$home/managed" UV_CACHE_DIR="$home/uv-cache"
  # From / and with no configuration file (UV_NO_CONFIG): a uv.toml or pyproject.toml of
  # the workspace could name its own download list, and the Python would land in the home
  # that later jobs reuse. Only the admin's UV_* variables count.
  export UV_NO_CONFIG=1
  prov_note "installing a uv-managed Python $UV_PYTHON with $uv"
  if ! (cd / && "$uv" python install --quiet --no-bin "$UV_PYTHON") >&2; then
    prov_why="uv could not install Python $UV_PYTHON (output above). Its downloads come from GitHub (python-build-standalone); UV_PYTHON_INSTALL_MIRROR names a mirror"
    return 1
  fi
  if ! python="$(cd / && "$uv" python find --managed-python "$UV_PYTHON")"; then
    python=""; prov_why="uv installed Python $UV_PYTHON but cannot find it"; return 1
  fi
  provision_how="a uv-managed Python (uv $(cd / && "$uv" --version | cut -d' ' -f2))"
}

prov_package_manager() {  # as root: the image's own Python; returns 1 when it cannot
  [ "$(id -u)" = 0 ] || { prov_why="not root"; return 1; }
  local pm="" log
  log="$(mktemp)"
  if command -v apt-get >/dev/null 2>&1; then
    pm="apt-get (python3 python3-venv)"
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends python3 python3-venv; } > "$log" 2>&1
  elif command -v dnf >/dev/null 2>&1; then
    pm="dnf (python3 python3-pip)"
    dnf install -y -q --setopt=install_weak_deps=False python3 python3-pip > "$log" 2>&1
  elif command -v microdnf >/dev/null 2>&1; then
    pm="microdnf (python3 python3-pip)"
    microdnf install -y --nodocs --setopt=install_weak_deps=0 python3 python3-pip > "$log" 2>&1
  elif command -v apk >/dev/null 2>&1; then
    pm="apk (python3 py3-pip)"
    apk add --no-cache python3 py3-pip > "$log" 2>&1
  else
    rm -f "$log"; prov_why="no apt-get, dnf, microdnf or apk"; return 1
  fi
  local rc=$?
  if [ "$rc" != 0 ]; then
    cat "$log" >&2; rm -f "$log"
    prov_why="$pm failed with exit code $rc (output above)"; return 1
  fi
  rm -f "$log"
  python="$(find_python)"
  if [ -z "$python" ]; then prov_why="$pm gave no Python >= 3.9"; return 1; fi
  provision_how="the distribution's Python, installed with $pm"
}

provision_python() {
  local raw="${GPU_CI_INSTALL_PYTHON:-auto}" mode t0 ms version
  mode="${raw,,}"
  case "$mode" in
    auto|system|managed) ;;
    *) prov_fail "input install-python must be auto, system or managed; got '$raw'." ;;
  esac
  [ "$(uname -s 2>/dev/null)" = Linux ] || return 0
  t0="${EPOCHREALTIME:-$SECONDS}"; t0="${t0/[.,]/}"
  python=""; provision_how=""; prov_why=""; uv=""
  local why_uv=""
  if [ "$mode" != system ] && uv="$(command -v uv 2>/dev/null)"; then  # (a) uv is here
    prov_uv_python || { why_uv="$prov_why"; prov_note "$why_uv"; }
  fi
  if [ -z "$python" ] && [ "$mode" != managed ]; then  # (b) root: the package manager
    if ! prov_package_manager; then
      if [ "$mode" = system ]; then
        prov_fail "no Python >= 3.9, and install-python: system cannot install one ($prov_why). Run the job as root in an image with apt-get, dnf, microdnf or apk, use install-python: managed, or install Python 3.9+ in the image."
      fi
      prov_note "the image's package manager cannot install Python ($prov_why)"
    fi
  fi
  if [ -z "$python" ]; then  # (c) the pinned uv (a uv that failed here would fail the same)
    [ -z "$why_uv" ] || prov_fail "$why_uv."
    prov_fetch_uv
    prov_uv_python || prov_fail "$prov_why."
  fi
  [ -n "$python" ] || return 0
  if [ -n "${EPOCHREALTIME:-}" ]; then
    ms=$(( (${EPOCHREALTIME/[.,]/} - t0) / 1000 ))
  else
    ms=$(( (SECONDS - t0) * 1000 ))
  fi
  # Isolated (-I) and from /: never the job's workspace, PYTHONPATH or site customizations.
  version="$(cd / && "$python" -I -c 'import platform; print(platform.python_version())')"
  local line
  line="No Python >= 3.9 in this job: installed Python $version, $provision_how, in $((ms / 1000)).$(printf '%03d' $((ms % 1000)) | cut -c1) s (install-python: $mode)."
  echo "gpu-ci bootstrap: $line"
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    printf '### gpu-ci bootstrap\n\n%s\n\n' "$line" >> "$GITHUB_STEP_SUMMARY" || true
  fi
  # Later actions of the job use it at once (a uv-managed Python is not on PATH).
  if [ -n "${GITHUB_ENV:-}" ]; then echo "GPU_CI_BOOTSTRAP_PYTHON=$python" >> "$GITHUB_ENV"; fi
  if [ -n "$uv" ]; then PATH="$(dirname "$uv"):$PATH"; export PATH; fi
}

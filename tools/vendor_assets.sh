#!/usr/bin/env bash
# Vendor the JavaScript the HTML book needs offline (no CDN) into book/_static/offline/.
# Needs npm and the npm registry; the result is committed, so building the book needs no Node.
# Usage: tools/vendor_assets.sh            (re-run after changing a version below)
set -euo pipefail

HTML_MANAGER_VERSION="1.0.7"   # @jupyter-widgets/html-manager, the widget manager for ipywidgets 8
MATHJAX_VERSION="3.2.2"        # mathjax 3.x, CommonHTML output
ORT_WEB_VERSION="1.30.0"       # onnxruntime-web: runs the live panels' ONNX graphs (wasm, one thread)
TOKENIZERS_VERSION="0.2.0"     # @huggingface/tokenizers: the shipped tokenizer.json in pure JS

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$repo_root/book/_static/offline"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cd "$work"
npm pack --silent "@jupyter-widgets/html-manager@$HTML_MANAGER_VERSION" "mathjax@$MATHJAX_VERSION" \
  "onnxruntime-web@$ORT_WEB_VERSION" "@huggingface/tokenizers@$TOKENIZERS_VERSION" >/dev/null
mkdir hm mj ort tk
tar xzf "jupyter-widgets-html-manager-$HTML_MANAGER_VERSION.tgz" -C hm
tar xzf "mathjax-$MATHJAX_VERSION.tgz" -C mj
tar xzf "onnxruntime-web-$ORT_WEB_VERSION.tgz" -C ort
tar xzf "huggingface-tokenizers-$TOKENIZERS_VERSION.tgz" -C tk
hm_dist="hm/package/dist"
mj_es5="mj/package/es5"

rm -rf "$dest"
mkdir -p "$dest/ipywidgets" "$dest/mathjax/output/chtml/fonts" "$dest/mathjax/input/tex"

# Widget manager: embed.js is self-contained for core widgets (no require.js). It finds its
# Font Awesome fonts next to itself (webpack publicPath = the script's folder); browsers take
# the woff2 files, so the eot/ttf/svg/woff copies are left out, as are the lazily loaded
# CodeMirror chunks (*.embed.js, only used by third-party widgets) and the source maps.
cp "$hm_dist/embed.js" "$hm_dist/embed.js.LICENSE.txt" "$dest/ipywidgets/"
cp "$hm_dist"/*.woff2 "$dest/ipywidgets/"
cp hm/package/LICENSE "$dest/ipywidgets/LICENSE"

# MathJax: the combined TeX+MathML/CHTML bundle, the CHTML woff-v2 fonts, and the components
# it loads on demand: TeX extensions (autoload, \require), the menu (ui/) and accessibility
# (a11y/). Left out: the speech-rule engine data (es5/sre/, 3.9 MB, only for the opt-in explorer),
# SVG output and the other bundles.
cp "$mj_es5/tex-mml-chtml.js" "$dest/mathjax/"
cp -r "$mj_es5/output/chtml/fonts/woff-v2" "$dest/mathjax/output/chtml/fonts/"
cp -r "$mj_es5/input/tex/extensions" "$dest/mathjax/input/tex/"
cp -r "$mj_es5/ui" "$dest/mathjax/"
mkdir -p "$dest/mathjax/a11y"
for f in "$mj_es5"/a11y/*.js; do
  [ "$(basename "$f")" = "sre.js" ] || cp "$f" "$dest/mathjax/a11y/"
done
cp mj/package/LICENSE "$dest/mathjax/LICENSE"

# The live panels (book/_ext/live_panels.py): onnxruntime-web's wasm-only ES module, the glue it imports
# and its one wasm binary (SIMD, one thread: a book page is not cross-origin isolated); the other builds
# (WebGPU/JSEP, JSPI, asyncify, the all-in-one bundles) and the source maps are left out. The tokenizer is
# one ES module. Only the English build keeps these (the Chinese pages load them from ../_static).
mkdir -p "$dest/onnxruntime-web" "$dest/tokenizers"
cp ort/package/dist/ort.wasm.min.mjs ort/package/dist/ort-wasm-simd-threaded.mjs \
   ort/package/dist/ort-wasm-simd-threaded.wasm ort/package/package.json "$dest/onnxruntime-web/"
cp tk/package/dist/tokenizers.min.mjs tk/package/LICENSE "$dest/tokenizers/"  # onnxruntime-web ships no LICENSE file: its package.json says MIT

hm_license="$(node -p "require('./hm/package/package.json').license")"
mj_license="$(node -p "require('./mj/package/package.json').license")"
ort_license="$(node -p "require('./ort/package/package.json').license")"
tk_license="$(node -p "require('./tk/package/package.json').license")"

cd "$dest"
{
  echo "# Vendored offline assets"
  echo
  echo "Written by \`tools/vendor_assets.sh\`; do not edit by hand. Re-run the script to update."
  echo "Loaded by \`_config.yml\` (\`mathjax_path\`, \`nb_ipywidgets_js\`); kept off the auto-added"
  echo "JS/CSS lists by \`book/_ext/offline_assets.py\`. \`onnxruntime-web/\` and \`tokenizers/\` are imported on"
  echo "first use by the live panels (\`book/_static/live/runtime.mjs\`), from the English build only."
  echo
  echo "| folder | npm package | version | licence |"
  echo "|---|---|---|---|"
  echo "| \`ipywidgets/\` | @jupyter-widgets/html-manager | $HTML_MANAGER_VERSION | $hm_license |"
  echo "| \`mathjax/\` | mathjax | $MATHJAX_VERSION | $mj_license |"
  echo "| \`onnxruntime-web/\` | onnxruntime-web | $ORT_WEB_VERSION | $ort_license |"
  echo "| \`tokenizers/\` | @huggingface/tokenizers | $TOKENIZERS_VERSION | $tk_license |"
  echo
  echo "Total size: $(du -sk . | cut -f1) KiB."
  echo
  echo "## Files"
  echo
  echo "| file | bytes |"
  echo "|---|---|"
  find . -type f ! -name MANIFEST.md | LC_ALL=C sort | while read -r f; do
    echo "| \`${f#./}\` | $(stat -c %s "$f") |"
  done
} > MANIFEST.md

echo "vendored into $dest: $(du -sh "$dest" | cut -f1)"

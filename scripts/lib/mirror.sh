# Sourced by scripts that debootstrap from the mirror apt uses on this machine.
# The Debian mirror apt uses here: deb822 stanzas in *.sources, one-line
# entries in *.list. Prints "URI" for $1 = suite ("bookworm", "bookworm-security").
mirror_for() {
    suite=$1
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk -v want="$suite" 'BEGIN { RS = ""; FS = "\n" }
            { uris = ""; ok = 0; deb = 0
              for (i = 1; i <= NF; i++) {
                  if ($i ~ /^URIs:/) { uris = $i; sub(/^URIs:[ \t]*/, "", uris) }
                  if ($i ~ /^Types:/ && $i ~ /[ \t]deb([ \t]|$)/) deb = 1
                  if ($i ~ /^Suites:/) { n = split($i, s, /[ \t]+/); for (j = 2; j <= n; j++) if (s[j] == want) ok = 1 }
              }
              if (deb && ok && uris != "") { split(uris, u, /[ \t]+/); print u[1]; exit } }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk -v want="$suite" '$1 == "deb" { i = 2; if ($i ~ /^\[/) while ($i !~ /\]$/) i++; if ($i ~ /^\[/ || $i ~ /\]$/) i++;
                                            if ($(i + 1) == want) { print $i; exit } }' "$f"
    done
}

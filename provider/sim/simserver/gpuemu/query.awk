# gpuprov sim: nvidia-smi --query-gpu. The first file lists the field
# names the driver knows (help_query_gpu), the second has one line per
# GPU of tab-separated name=value pairs; a known field without a value
# prints [N/A], an unknown one fails as the driver does (exit 2).
FNR == NR { valid[$0] = 1; next }
!started {
	started = 1
	n = split(q, f, ",")
	for (i = 1; i <= n; i++) {
		if (!(f[i] in valid)) {
			printf "Field \"%s\" is not a valid field to query.\n\n", f[i]
			bad = 1
			exit 2
		}
	}
	if (fmt !~ /noheader/) {
		h = ""
		for (i = 1; i <= n; i++) h = h (i > 1 ? ", " : "") f[i]
		print h
	}
}
{
	split("", v)
	m = split($0, kv, "\t")
	for (j = 1; j <= m; j++) {
		p = index(kv[j], "=")
		v[substr(kv[j], 1, p - 1)] = substr(kv[j], p + 1)
	}
	line = ""
	for (i = 1; i <= n; i++) line = line (i > 1 ? ", " : "") ((f[i] in v) ? v[f[i]] : "[N/A]")
	print line
}
END { if (bad) exit 2 }

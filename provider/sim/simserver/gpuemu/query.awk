# gpuprov sim: nvidia-smi --query-gpu. The first file lists the field
# names the driver knows (name, canonical name, unit; tab-separated), the
# second has one line per GPU of tab-separated canonical-name=value pairs,
# or "!" and the error the driver prints for a GPU it cannot reach. idx
# lists the GPUs to print (" 0 1 "). A known field without a value prints
# [N/A]; an unknown one fails as the driver does (exit 2); a GPU it cannot
# reach prints its error and makes the exit status 15. util, when set (the
# file .sim-gpu/utilization, which a program on the machine writes to
# stand for a GPU job), is every GPU's utilization.gpu.
FNR == NR { canon[$1] = $2; unit[$1] = $3; next }
!started {
	started = 1
	n = split(q, f, ",")
	for (i = 1; i <= n; i++) {
		if (!(f[i] in canon)) {
			printf "Field \"%s\" is not a valid field to query.\n\n", f[i]
			bad = 1
			exit 2
		}
	}
	units = (fmt !~ /nounits/)
	if (fmt !~ /noheader/) {
		h = ""
		for (i = 1; i <= n; i++) {
			c = canon[f[i]]
			if (units && unit[f[i]] != "") c = c " [" unit[f[i]] "]"
			h = h (i > 1 ? ", " : "") c
		}
		print h
	}
}
{
	if (index(idx, " " (FNR - 1) " ") == 0) next
	if ($1 == "!") { print $2; lost = 1; next }
	split("", v)
	for (j = 1; j <= NF; j++) {
		p = index($j, "=")
		v[substr($j, 1, p - 1)] = substr($j, p + 1)
	}
	if (util ~ /^[0-9]+$/ && ("utilization.gpu" in v)) v["utilization.gpu"] = util
	line = ""
	for (i = 1; i <= n; i++) {
		c = canon[f[i]]
		x = (c in v) ? v[c] : "[N/A]"
		if (units && unit[f[i]] != "" && x != "[N/A]") x = x " " unit[f[i]]
		line = line (i > 1 ? ", " : "") x
	}
	print line
}
END { if (bad) exit 2; if (lost) exit 15 }

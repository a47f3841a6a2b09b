# The demo's utilisation chart, run by tests/e2e/demo.sh in its output directory:
# by-model.dat (memory % and compute % allocated per vendor/model) and by-node.dat
# (allocated and capacity GiB per node), both written by report.py.
set terminal pngcairo size 1200,520 font "sans,10"
set output "utilisation.png"
set multiplot layout 1,2 title "accelpool demo: pool utilisation from the pods' assignments"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set xtics rotate by -30
set key top right
set title "Allocated, % of capacity, by vendor/model"
set ylabel "%"
set yrange [0:100]
plot "by-model.dat" using 2:xtic(1) title "memory", "" using 3 title "compute"
set title "Memory per node: allocated vs capacity"
set ylabel "GiB"
set yrange [0:*]
plot "by-node.dat" using 2:xtic(1) title "allocated", "" using 3 title "capacity"
unset multiplot

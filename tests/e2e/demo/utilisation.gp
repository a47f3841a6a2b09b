# The demo's picture, run by tests/e2e/demo.sh in its output directory: the placement
# and utilisation tables on top (placement-labels.gp), and two charts below from
# by-model.dat (memory % and compute % allocated per vendor/model) and by-node.dat
# (allocated and capacity GiB per node), all written by report.py.
set terminal pngcairo size 1300,1250 font "sans,10"
set output "utilisation.png"
load "placement-labels.gp"
set multiplot
set size 0.5, 0.42
set origin 0.0, 0.0
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
unset label
set origin 0.5, 0.0
set title "Memory per node: allocated vs capacity"
set ylabel "GiB"
set yrange [0:*]
plot "by-node.dat" using 2:xtic(1) title "allocated", "" using 3 title "capacity"
unset multiplot

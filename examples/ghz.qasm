// A 5-qubit GHZ state with a phase kick, measured: counts split between 00000 and 11111.
OPENQASM 2.0;
include "qelib1.inc";
qreg q[5];
creg c[5];
h q[0];
cx q[0], q[1];
cx q[1], q[2];
cx q[2], q[3];
cx q[3], q[4];
rz(0.3) q[4];
measure q -> c;

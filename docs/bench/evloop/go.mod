module evloopbench

go 1.26.0

require github.com/bulwarkhq/bulwark v0.0.0

replace github.com/bulwarkhq/bulwark => ../../..

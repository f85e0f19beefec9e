package testdoc

module gotmplcheck

go 1.24

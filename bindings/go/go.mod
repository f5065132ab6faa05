module github.com/libmoe/moe

go 1.19
